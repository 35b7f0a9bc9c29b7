// Binding for the replay buffer kernels (rlblocks/replay.hpp): validates the settings and
// every array with the GIL held, then stores / samples with the GIL released. A call that
// raises has not changed the buffer. The messages equal those of the numpy twin
// (rlblocks._reference.replay).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "rlblocks/checked.hpp"
#include "rlblocks/replay.hpp"

namespace py = pybind11;

namespace rlblocks::bindings {
namespace {

bool is_numpy(const py::handle& obj, const char* type) {
  return py::isinstance(obj, py::module_::import("numpy").attr(type));
}

// A real number (int or float, numpy's too, not a bool) as a double (+-inf when an int is too
// large); ValueError "<name>: expected <allowed>, got <repr>" for anything else.
double to_real(const py::handle& obj, const std::string& name, const std::string& allowed) {
  const bool real =
      !py::isinstance<py::bool_>(obj) && !is_numpy(obj, "bool_") &&
      (PyFloat_Check(obj.ptr()) || PyLong_Check(obj.ptr()) || is_numpy(obj, "floating") || is_numpy(obj, "integer"));
  if (!real) throw py::value_error(name + ": expected " + allowed + ", got " + std::string(py::repr(obj)));
  py::object f = py::reinterpret_steal<py::object>(PyNumber_Float(obj.ptr()));
  if (!f) {
    if (!PyErr_ExceptionMatches(PyExc_OverflowError)) throw py::error_already_set();
    PyErr_Clear();
    return py::int_(py::reinterpret_borrow<py::object>(obj)) > py::int_(0) ? HUGE_VAL : -HUGE_VAL;
  }
  return PyFloat_AsDouble(f.ptr());
}

bool to_bool(const py::handle& obj, const std::string& name) {
  if (!(py::isinstance<py::bool_>(obj) || is_numpy(obj, "bool_"))) {
    throw py::value_error(name + ": expected a bool, got " + std::string(py::repr(obj)));
  }
  return PyObject_IsTrue(obj.ptr()) == 1;
}

std::string big_str(unsigned __int128 v) {
  std::string s;
  do {
    s.insert(s.begin(), static_cast<char>('0' + static_cast<int>(v % 10)));
    v /= 10;
  } while (v != 0);
  return s;
}

// This machine's physical memory in bytes (what the numpy twin reads from os.sysconf).
std::int64_t machine_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<std::int64_t>(pages) * page : std::numeric_limits<std::int64_t>::max();
}

Shape to_shape(const py::object& obj, const std::string& name) {
  if (py::isinstance<py::str>(obj) || !py::isinstance<py::sequence>(obj)) {
    throw py::value_error(name + ": expected a tuple of ints >= 0, got " + std::string(py::repr(obj)));
  }
  Shape s;
  for (py::handle d : py::reinterpret_borrow<py::sequence>(obj)) {
    const std::int64_t v = to_int(d, name);
    if (v < 0) throw py::value_error(name + ": expected a tuple of ints >= 0, got " + std::string(py::repr(obj)));
    s.push_back(v);
  }
  return s;
}

py::dtype to_dtype(const py::object& obj, const std::string& name) {
  py::dtype dt;
  try {
    dt = py::dtype::from_args(obj);
  } catch (py::error_already_set&) {
    throw py::value_error(name + ": expected a numpy dtype, got " + std::string(py::repr(obj)));
  }
  const char kind = dt.kind();
  const auto itemsize = static_cast<std::int64_t>(dt.itemsize());
  const bool native = dt.byteorder() != '>' || itemsize == 1;
  const bool sized = itemsize == 1 || itemsize == 2 || itemsize == 4 || itemsize == 8;
  if (!(kind == 'b' || kind == 'i' || kind == 'u' || kind == 'f') || !sized || !native) {
    throw py::value_error(name + ": expected a native bool/int/uint/float dtype of 1, 2, 4 or 8 bytes, got " +
                          std::string(py::str(dt)));
  }
  return dt;
}

// obj as a C-contiguous aligned array of `dtype` and `shape`; ValueError naming `name` when
// it is no array, has another shape, or a dtype numpy cannot cast under `casting`.
py::array converted(const py::object& obj, const std::string& name, const Shape& shape, const py::dtype& dtype,
                    const char* casting) {
  py::array raw = py::array::ensure(obj);
  if (!raw) {
    PyErr_Clear();
    throw py::value_error(name + ": expected an array of shape " + shape_str(shape) + ", got " +
                          std::string(py::repr(obj)));
  }
  if (array_shape(raw) != shape) {
    throw py::value_error(name + ": expected shape " + shape_str(shape) + ", got " + shape_str(array_shape(raw)));
  }
  if (!raw.dtype().equal(dtype)) {
    const bool ok = py::module_::import("numpy").attr("can_cast")(raw.dtype(), dtype, casting).cast<bool>();
    if (!ok) {
      throw py::value_error(name + ": expected dtype " + std::string(py::str(dtype)) + " (" + casting + " cast), got " +
                            std::string(py::str(raw.dtype())));
    }
  }
  const int flags = py::array::c_style | py::array::forcecast | py::detail::npy_api::NPY_ARRAY_ALIGNED_;
  py::object conv = py::reinterpret_steal<py::object>(
      py::detail::npy_api::get().PyArray_FromAny_(raw.ptr(), dtype.inc_ref().ptr(), 0, 0, flags, nullptr));
  if (!conv) throw py::error_already_set();
  return py::reinterpret_borrow<py::array>(conv);
}

py::array checked_bool(const py::object& obj, const std::string& name, std::int64_t n) {
  py::array raw = py::array::ensure(obj);
  if (!raw) PyErr_Clear();
  if (!raw || raw.dtype().kind() != 'b' || array_shape(raw) != Shape{n}) {
    const std::string got = raw ? std::string(py::str(raw.dtype())) + " array of shape " + shape_str(array_shape(raw))
                                : std::string(py::repr(obj));
    throw py::value_error(name + ": expected a bool array of shape (" + std::to_string(n) + ",), got " + got);
  }
  return converted(raw, name, Shape{n}, py::dtype::of<bool>(), "no");
}

py::tuple to_tuple(const Shape& s) {
  py::tuple t(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) t[i] = py::int_(s[i]);
  return t;
}

class PyReplay {
 public:
  PyReplay(const py::object& capacity, const py::object& num_envs, const py::object& obs_shape,
           const py::object& obs_dtype, const py::object& action_shape, const py::object& action_dtype,
           const py::object& n_step, const py::object& gamma, const py::object& frame_stack,
           const py::object& stack_axis, const py::object& prioritized) {
    num_envs_ = to_int(num_envs, "num_envs");
    if (num_envs_ < 1) throw py::value_error("num_envs: expected an int >= 1, got " + std::to_string(num_envs_));
    const std::int64_t cap = to_int(capacity, "capacity");
    if (cap < 2 * num_envs_) {
      throw py::value_error("capacity: expected an int >= 2 * num_envs = " + std::to_string(2 * num_envs_) +
                            " (each env keeps capacity // num_envs >= 2 steps), got " + std::to_string(cap));
    }
    obs_shape_ = to_shape(obs_shape, "obs_shape");
    obs_dtype_ = to_dtype(obs_dtype, "obs_dtype");
    action_shape_ = to_shape(action_shape, "action_shape");
    action_dtype_ = to_dtype(action_dtype, "action_dtype");
    n_step_ = to_int(n_step, "n_step");
    if (n_step_ < 1) throw py::value_error("n_step: expected an int >= 1, got " + std::to_string(n_step_));
    const double g = to_real(gamma, "gamma", "a float in [0, 1]");
    if (!(g >= 0.0 && g <= 1.0)) {
      throw py::value_error("gamma: expected a float in [0, 1], got " + std::string(py::repr(gamma)));
    }
    frame_stack_ = to_int(frame_stack, "frame_stack");
    if (frame_stack_ < 0 || frame_stack_ > ReplayCore::kMaxK) {
      throw py::value_error("frame_stack: expected 0 (no stacking) or 1.." + std::to_string(ReplayCore::kMaxK) +
                            ", got " + std::to_string(frame_stack_));
    }
    const std::int64_t axis = to_int(stack_axis, "stack_axis");
    const auto nd = static_cast<std::int64_t>(obs_shape_.size());
    if (axis != 0 && axis != -1 && !(nd >= 1 && axis == nd - 1)) {
      throw py::value_error("stack_axis: expected 0 or -1, got " + std::to_string(axis));
    }
    stack_axis_ = axis == 0 && nd != 1 ? 0 : -1;
    Shape frame_shape = obs_shape_;
    if (frame_stack_ > 0) {
      const std::size_t ax = stack_axis_ == 0 ? 0 : obs_shape_.size() - 1;
      if (obs_shape_.empty() || obs_shape_[ax] != frame_stack_) {
        throw py::value_error("obs_shape: frame_stack=" + std::to_string(frame_stack_) + " needs obs_shape[" +
                              std::to_string(stack_axis_) + "] == " + std::to_string(frame_stack_) +
                              " (the stack axis), got " + shape_str(obs_shape_));
      }
      frame_shape.erase(frame_shape.begin() + static_cast<std::ptrdiff_t>(ax));
    }
    frame_shape_ = frame_shape;
    const bool prio = to_bool(prioritized, "prioritized");
    ReplayConfig c;
    c.num_envs = num_envs_;
    c.per_env = cap / num_envs_;
    if (frame_stack_ > 1 && c.per_env < frame_stack_ + 1) {
      throw py::value_error("capacity: frame_stack=" + std::to_string(frame_stack_) +
                            " needs capacity // num_envs >= frame_stack + 1 = " + std::to_string(frame_stack_ + 1) +
                            " (a stack's frames and its successor must all be kept, else nothing is ever "
                            "sampleable), got capacity=" +
                            std::to_string(cap) + " with num_envs=" + std::to_string(num_envs_) +
                            "; use capacity >= " + std::to_string(num_envs_ * (frame_stack_ + 1)));
    }
    c.elem = static_cast<std::int64_t>(obs_dtype_.itemsize());
    c.frame_bytes =
        checked_mul(checked_product(frame_shape_, "ReplayBuffer: frame size"), c.elem, "ReplayBuffer: frame bytes");
    c.k = frame_stack_ > 0 ? frame_stack_ : 1;
    c.stack_last = frame_stack_ > 0 && stack_axis_ == -1;
    c.action_bytes = checked_mul(checked_product(action_shape_, "ReplayBuffer: action size"),
                                 static_cast<std::int64_t>(action_dtype_.itemsize()), "ReplayBuffer: action bytes");
    c.n_step = n_step_;
    c.gamma = g;
    c.prioritized = prio;
    check_memory(cap, c);
    core_ = std::make_unique<ReplayCore>(c);
  }

  // Refuses a buffer whose storage (every array the core allocates: frames, actions,
  // rewards, flags, offsets, counts and the trees) exceeds this machine's memory, naming the
  // bytes against the memory and a capacity that fits in half of it. Exact (128-bit) sums.
  static void check_memory(std::int64_t cap, const ReplayConfig& c) {
    using u128 = unsigned __int128;
    const u128 entries = static_cast<u128>(c.num_envs) * static_cast<u128>(c.per_env);
    u128 size = 1;
    while (size < entries) size *= 2;
    const u128 frames = entries * static_cast<u128>(c.frame_bytes);
    const u128 actions = entries * static_cast<u128>(c.action_bytes);
    const u128 small = entries * 6 + static_cast<u128>(c.num_envs) * 8;
    const u128 trees = size * (c.prioritized ? 24 : 16);
    const u128 total = frames + actions + small + trees;
    const std::int64_t mem = machine_memory();
    if (total <= static_cast<u128>(mem)) return;
    const u128 per_step =
        static_cast<u128>(c.frame_bytes) + static_cast<u128>(c.action_bytes) + 6 + (c.prioritized ? 48 : 32);
    const u128 fit =
        static_cast<u128>(mem / 2) / per_step / static_cast<u128>(c.num_envs) * static_cast<u128>(c.num_envs);
    const std::string advice = fit >= static_cast<u128>(2 * c.num_envs)
                                   ? "use capacity <= " + big_str(fit)
                                   : "no capacity fits: use a smaller obs_shape or fewer num_envs";
    throw py::value_error("capacity: " + std::to_string(cap) + " steps need " + big_str(total) + " bytes (frames " +
                          big_str(frames) + ", actions " + big_str(actions) + ", rewards, flags, offsets and counts " +
                          big_str(small) + ", sum trees " + big_str(trees) + "), more than this machine's memory (" +
                          std::to_string(mem) + " bytes); " + advice);
  }

  void add(const py::object& obs, const py::object& actions, const py::object& rewards, const py::object& terminated,
           const py::object& truncated, const py::object& next_obs, const py::object& valid) {
    const Shape obs_want = with_lead(num_envs_, obs_shape_);
    // float buffers take any real observation; integer ones only lossless casts (no wrap-around)
    const char* obs_cast = obs_dtype_.kind() == 'f' ? "same_kind" : "safe";
    py::array o = converted(obs, "obs", obs_want, obs_dtype_, obs_cast);
    py::array a = converted(actions, "actions", with_lead(num_envs_, action_shape_), action_dtype_, "same_kind");
    py::array r = py::array::ensure(rewards);
    if (!r) PyErr_Clear();
    if (r && !(r.dtype().kind() == 'i' || r.dtype().kind() == 'u' || r.dtype().kind() == 'f')) {
      throw py::value_error("rewards: expected a real-valued (int or float) array, got dtype " +
                            std::string(py::str(r.dtype())));
    }
    r = converted(rewards, "rewards", Shape{num_envs_}, py::dtype::of<float>(), "unsafe");
    py::array te = checked_bool(terminated, "terminated", num_envs_);
    py::array tr = checked_bool(truncated, "truncated", num_envs_);
    py::array n = converted(next_obs, "next_obs", obs_want, obs_dtype_, obs_cast);
    py::array va;
    if (!valid.is_none()) va = checked_bool(valid, "valid", num_envs_);
    const auto* pv = valid.is_none() ? nullptr : static_cast<const std::uint8_t*>(va.data());
    const auto* po = static_cast<const unsigned char*>(o.data());
    const auto* pa = static_cast<const unsigned char*>(a.data());
    const auto* pr = static_cast<const float*>(r.data());
    const auto* pte = static_cast<const std::uint8_t*>(te.data());
    const auto* ptr = static_cast<const std::uint8_t*>(tr.data());
    const auto* pn = static_cast<const unsigned char*>(n.data());
    ReplayCore::StackMismatch bad;
    const auto store = [&] {
      std::lock_guard<std::mutex> lk(mu_);
      bad = core_->find_stack_mismatch(po, pte, ptr, pn, pv);
      if (bad.env < 0) core_->add(po, pa, pr, pte, ptr, pn, pv);
    };
    if (num_envs_ * core_->config().frame_bytes >= kReleaseGilBytes) {
      py::gil_scoped_release release;
      store();
    } else {
      store();
    }
    if (bad.env >= 0) {
      const std::string k = std::to_string(frame_stack_);
      throw py::value_error(std::string(bad.next_obs ? "next_obs[" : "obs[") + std::to_string(bad.env) + "]: frame " +
                            std::to_string(bad.frame) +
                            " of the stack is not the frame the env's earlier steps hold (frame_stack=" + k +
                            ": a stack's older frames are the newest frames of the env's previous steps, and a "
                            "new episode's stack repeats its first frame, as FrameStacker makes them); nothing was "
                            "stored");
    }
  }

  // u: B uniform numbers in [0, 1). Returns (obs, actions, rewards, next_obs, discounts,
  // indices, leaves, sampleable, min_leaf): the sampled steps' tree leaves (> 0; probability
  // leaf / total) and the smallest positive leaf, from which importance weights follow. `out`: None, or a sequence of
  // six arrays (obs, actions, rewards, next_obs, discounts, indices) of the exact dtypes and shapes to write into (a
  // reused batch costs no allocation, hence no page faults).
  py::tuple sample(const py::object& u_obj, const py::object& out) {
    py::array raw = py::array::ensure(u_obj);
    if (!raw) PyErr_Clear();
    if (!raw || raw.ndim() != 1 || raw.dtype().kind() != 'f') {
      throw py::value_error("u: expected a 1-d float64 array of uniform numbers, got " + std::string(py::repr(u_obj)));
    }
    auto u = py::array_t < double, py::array::c_style | py::array::forcecast > ::ensure(raw);
    const auto B = static_cast<std::int64_t>(u.size());
    const std::int64_t N = len();
    if (B < 1 || B > N) {
      throw py::value_error("batch_size: expected 1 <= batch_size <= " + std::to_string(N) +
                            " (the sampleable steps, len(buffer)), got " + std::to_string(B));
    }
    if (!(total() > 0.0)) {
      throw py::value_error(
          "priorities: every sampleable step has priority 0 (nothing to sample; use priority_eps > 0)");
    }
    const double* pu = u.data();
    for (std::int64_t i = 0; i < B; ++i) {
      if (!(pu[i] >= 0.0 && pu[i] < 1.0)) {
        throw py::value_error("u[" + std::to_string(i) + "] = " + std::string(py::repr(py::float_(pu[i]))) +
                              ": expected a number in [0, 1)");
      }
    }
    const py::dtype f32 = py::dtype::of<float>(), i64 = py::dtype::of<std::int64_t>();
    const Shape obs_s = with_lead(B, obs_shape_), act_s = with_lead(B, action_shape_);
    py::array obs, actions, rewards, next_obs, discounts, indices;
    if (out.is_none()) {
      obs = py::array(obs_dtype_, obs_s);
      actions = py::array(action_dtype_, act_s);
      rewards = py::array(f32, Shape{B});
      next_obs = py::array(obs_dtype_, obs_s);
      discounts = py::array(f32, Shape{B});
      indices = py::array(i64, Shape{B});
    } else {
      if (py::isinstance<py::str>(out) || !py::isinstance<py::sequence>(out) || py::len(out) != 6) {
        throw py::value_error("out: expected None or a ReplaySample, got " + std::string(py::repr(out)));
      }
      const auto seq = py::reinterpret_borrow<py::sequence>(out);
      obs = checked_out(seq[0], obs_dtype_, obs_s, "sample: out.obs");
      actions = checked_out(seq[1], action_dtype_, act_s, "sample: out.actions");
      rewards = checked_out(seq[2], f32, Shape{B}, "sample: out.rewards");
      next_obs = checked_out(seq[3], obs_dtype_, obs_s, "sample: out.next_obs");
      discounts = checked_out(seq[4], f32, Shape{B}, "sample: out.discounts");
      indices = checked_out(seq[5], i64, Shape{B}, "sample: out.indices");
    }
    py::array_t<double> leaves(B);
    auto* po = static_cast<unsigned char*>(obs.mutable_data());
    auto* pa = static_cast<unsigned char*>(actions.mutable_data());
    auto* pn = static_cast<unsigned char*>(next_obs.mutable_data());
    auto* pr = static_cast<float*>(rewards.mutable_data());
    auto* pd = static_cast<float*>(discounts.mutable_data());
    auto* pi = static_cast<std::int64_t*>(indices.mutable_data());
    double* pp = leaves.mutable_data();
    ReplaySampleInfo info;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lk(mu_);
      if (B > core_->sampleable()) throw std::length_error("batch_size: the buffer changed during the call");
      info = core_->sample(pu, B, pi, pp, po, pa, pr, pn, pd);
    }
    return py::make_tuple(obs, actions, rewards, next_obs, discounts, indices, leaves, info.sampleable,
                          info.min_positive);
  }

  // Sets the tree leaves (priority ** alpha, computed by the caller) of sampleable entries.
  void set_leaves(const py::object& indices, const py::object& values) {
    if (!core_->config().prioritized) throw py::value_error("set_leaves: this buffer is uniform (prioritized=False)");
    py::array ri = py::array::ensure(indices);
    if (!ri) PyErr_Clear();
    if (!ri || ri.ndim() != 1 || !(ri.dtype().kind() == 'i' || ri.dtype().kind() == 'u' || ri.size() == 0)) {
      throw py::value_error("indices: expected a 1-d int array, got " + std::string(py::repr(indices)));
    }
    const auto n = static_cast<std::int64_t>(ri.size());
    auto idx = py::array_t < std::int64_t, py::array::c_style | py::array::forcecast > ::ensure(ri);
    py::array rv = py::array::ensure(values);
    if (!rv) PyErr_Clear();
    if (!rv || array_shape(rv) != Shape{n} ||
        !(rv.dtype().kind() == 'f' || rv.dtype().kind() == 'i' || rv.dtype().kind() == 'u')) {
      throw py::value_error("priorities: expected a real-valued array of shape (" + std::to_string(n) + ",), got " +
                            (rv ? describe(rv) : std::string(py::repr(values))));
    }
    auto val = py::array_t < double, py::array::c_style | py::array::forcecast > ::ensure(rv);
    const std::int64_t* pi = idx.data();
    const double* pv = val.data();
    std::lock_guard<std::mutex> lk(mu_);
    for (std::int64_t i = 0; i < n; ++i) {
      if (pi[i] < 0 || pi[i] >= core_->entries()) {
        throw py::value_error("indices[" + std::to_string(i) + "] = " + std::to_string(pi[i]) +
                              " is out of range [0, " + std::to_string(core_->entries()) + ")");
      }
      if (!core_->is_sampleable(pi[i])) {
        throw py::value_error("indices[" + std::to_string(i) + "] = " + std::to_string(pi[i]) +
                              " is not a sampleable step (overwritten since it was sampled, or not complete)");
      }
      if (!(std::isfinite(pv[i]) && pv[i] >= 0.0)) {
        throw py::value_error("priorities[" + std::to_string(i) + "] = " + std::string(py::repr(py::float_(pv[i]))) +
                              ": expected a finite value >= 0");
      }
      if (pv[i] > ReplayCore::kMaxLeaf) {
        throw py::value_error("priorities[" + std::to_string(i) + "] = " + std::string(py::repr(py::float_(pv[i]))) +
                              ": a tree leaf must be <= 2**960 (so that the sum tree stays finite)");
      }
    }
    core_->set_leaves(pi, pv, n);
  }

  py::dict get_state() {
    std::lock_guard<std::mutex> lk(mu_);
    const ReplayConfig& c = core_->config();
    const Shape ring{c.num_envs, c.per_env};
    py::dict d;
    d["frames"] = copy_out(core_->frames().data(), obs_dtype_, concat(ring, frame_shape_));
    d["actions"] = copy_out(core_->actions().data(), action_dtype_, concat(ring, action_shape_));
    d["rewards"] = copy_out(core_->rewards().data(), py::dtype::of<float>(), ring);
    d["flags"] = copy_out(core_->flags().data(), py::dtype::of<std::uint8_t>(), ring);
    d["offs"] = copy_out(core_->offs().data(), py::dtype::of<std::uint8_t>(), ring);
    d["counts"] = copy_out(core_->counts().data(), py::dtype::of<std::int64_t>(), Shape{c.num_envs});
    py::array_t<double> leaves(core_->entries());
    double* pl = leaves.mutable_data();
    for (std::int64_t i = 0; i < core_->entries(); ++i) pl[i] = core_->leaf(i);
    d["leaves"] = leaves;
    d["max_leaf"] = py::float_(core_->max_leaf());
    return d;
  }

  void set_state(const py::object& state) {
    if (!py::isinstance<py::dict>(state)) {
      throw py::value_error("state: expected a dict from get_state(), got " +
                            std::string(Py_TYPE(state.ptr())->tp_name));
    }
    const auto d = py::reinterpret_borrow<py::dict>(state);
    const ReplayConfig& c = core_->config();
    const Shape ring{c.num_envs, c.per_env};
    auto fresh = std::make_unique<ReplayCore>(c);
    copy_in(d, "frames", obs_dtype_, concat(ring, frame_shape_), fresh->frames().data());
    copy_in(d, "actions", action_dtype_, concat(ring, action_shape_), fresh->actions().data());
    copy_in(d, "rewards", py::dtype::of<float>(), ring, fresh->rewards().data());
    copy_in(d, "flags", py::dtype::of<std::uint8_t>(), ring, fresh->flags().data());
    copy_in(d, "offs", py::dtype::of<std::uint8_t>(), ring, fresh->offs().data());
    copy_in(d, "counts", py::dtype::of<std::int64_t>(), Shape{c.num_envs}, fresh->counts().data());
    std::vector<double> leaves(static_cast<std::size_t>(core_->entries()));
    copy_in(d, "leaves", py::dtype::of<double>(), Shape{core_->entries()}, leaves.data());
    if (!d.contains("max_leaf")) throw py::value_error("state: missing 'max_leaf'");
    const py::object m = d["max_leaf"];
    const double max_leaf = to_real(m, "state['max_leaf']", "a float in [1, 2**960]");
    if (!(max_leaf >= 1.0 && max_leaf <= ReplayCore::kMaxLeaf)) {
      throw py::value_error("state['max_leaf']: expected a float in [1, 2**960], got " + std::string(py::repr(m)));
    }
    if (!c.prioritized && max_leaf != 1.0) {
      throw py::value_error("state['max_leaf']: expected 1.0 (a uniform buffer), got " + std::string(py::repr(m)));
    }
    try {
      fresh->restore(leaves.data(), max_leaf);
    } catch (const std::invalid_argument& err) {
      throw py::value_error(err.what());
    }
    std::lock_guard<std::mutex> lk(mu_);
    core_ = std::move(fresh);
  }

  // The constructor's arguments (pickling: these, then the state).
  py::tuple args() const {
    return py::make_tuple(core_->entries(), num_envs_, to_tuple(obs_shape_), obs_dtype_, to_tuple(action_shape_),
                          action_dtype_, n_step_, core_->config().gamma, frame_stack_, stack_axis_,
                          core_->config().prioritized);
  }

  std::int64_t capacity() const { return core_->entries(); }
  std::int64_t num_envs() const { return num_envs_; }
  std::int64_t len() const {
    std::lock_guard<std::mutex> lk(mu_);
    return core_->sampleable();
  }
  double total() const {
    std::lock_guard<std::mutex> lk(mu_);
    return core_->total();
  }
  std::int64_t nbytes() const { return core_->nbytes(); }
  py::tuple obs_shape() const { return to_tuple(obs_shape_); }
  py::tuple action_shape() const { return to_tuple(action_shape_); }
  py::dtype obs_dtype() const { return obs_dtype_; }
  py::dtype action_dtype() const { return action_dtype_; }
  std::int64_t n_step() const { return n_step_; }
  double gamma() const { return core_->config().gamma; }
  std::int64_t frame_stack() const { return frame_stack_; }
  std::int64_t stack_axis() const { return stack_axis_; }
  bool prioritized() const { return core_->config().prioritized; }
  void visit(const std::function<void(const ReplayCore&)>& fn) const {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lk(mu_);
    fn(*core_);
  }

 private:
  static Shape concat(const Shape& a, const Shape& b) {
    Shape s = a;
    s.insert(s.end(), b.begin(), b.end());
    return s;
  }

  static py::array copy_out(const void* src, const py::dtype& dt, const Shape& shape) {
    py::array a(dt, shape);
    if (a.nbytes() > 0) std::memcpy(a.mutable_data(), src, static_cast<std::size_t>(a.nbytes()));
    return a;
  }

  static void copy_in(const py::dict& d, const char* key, const py::dtype& dt, const Shape& shape, void* dst) {
    if (!d.contains(key)) throw py::value_error(std::string("state: missing '") + key + "'");
    py::object v = d[key];
    py::array raw = py::array::ensure(v);
    if (!raw) PyErr_Clear();
    if (!raw || !raw.dtype().equal(dt) || array_shape(raw) != shape) {
      throw py::value_error(std::string("state['") + key + "']: expected a " + std::string(py::str(dt)) +
                            " array of shape " + shape_str(shape) + ", got " +
                            (raw ? describe(raw) : std::string(py::repr(v))));
    }
    py::array a = converted(raw, std::string("state['") + key + "']", shape, dt, "no");
    if (a.nbytes() > 0) std::memcpy(dst, a.data(), static_cast<std::size_t>(a.nbytes()));
  }

  std::int64_t num_envs_ = 1, n_step_ = 1, frame_stack_ = 0, stack_axis_ = -1;
  Shape obs_shape_, frame_shape_, action_shape_;
  py::dtype obs_dtype_, action_dtype_;
  std::unique_ptr<ReplayCore> core_;
  // Held while the core is read or written: add / sample run with the GIL released, so
  // Python threads may call into the same buffer at once.
  mutable std::mutex mu_;
};

}  // namespace

bool with_replay_core(const py::handle& obj, const std::function<void(const ReplayCore&)>& fn) {
  if (!py::isinstance<PyReplay>(obj)) return false;
  obj.cast<const PyReplay&>().visit(fn);
  return true;
}

void register_replay(py::module_& m) {
  py::class_<PyReplay>(m, "ReplayCore", "Replay storage: per-env rings, sum tree, n-step and frame-once assembly.")
      .def(py::init<const py::object&, const py::object&, const py::object&, const py::object&, const py::object&,
                    const py::object&, const py::object&, const py::object&, const py::object&, const py::object&,
                    const py::object&>(),
           py::arg("capacity"), py::arg("num_envs"), py::arg("obs_shape"), py::arg("obs_dtype"),
           py::arg("action_shape"), py::arg("action_dtype"), py::arg("n_step"), py::arg("gamma"),
           py::arg("frame_stack"), py::arg("stack_axis"), py::arg("prioritized"))
      .def_property_readonly("capacity", &PyReplay::capacity)
      .def_property_readonly("num_envs", &PyReplay::num_envs)
      .def_property_readonly("nbytes", &PyReplay::nbytes)
      .def_property_readonly("obs_shape", &PyReplay::obs_shape)
      .def_property_readonly("obs_dtype", &PyReplay::obs_dtype)
      .def_property_readonly("action_shape", &PyReplay::action_shape)
      .def_property_readonly("action_dtype", &PyReplay::action_dtype)
      .def_property_readonly("n_step", &PyReplay::n_step)
      .def_property_readonly("gamma", &PyReplay::gamma)
      .def_property_readonly("frame_stack", &PyReplay::frame_stack)
      .def_property_readonly("stack_axis", &PyReplay::stack_axis)
      .def_property_readonly("prioritized", &PyReplay::prioritized)
      .def("__len__", &PyReplay::len)
      .def("add", &PyReplay::add, py::arg("obs"), py::arg("actions"), py::arg("rewards"), py::arg("terminated"),
           py::arg("truncated"), py::arg("next_obs"), py::arg("valid") = py::none())
      .def("sample", &PyReplay::sample, py::arg("u"), py::arg("out") = py::none())
      .def("set_leaves", &PyReplay::set_leaves, py::arg("indices"), py::arg("values"))
      .def("get_state", &PyReplay::get_state)
      .def("set_state", &PyReplay::set_state, py::arg("state"))
      .def(py::pickle([](PyReplay& r) { return py::make_tuple(r.args(), r.get_state()); },
                      [](const py::tuple& t) {
                        if (t.size() != 2) throw py::value_error("ReplayCore: not a pickled ReplayCore");
                        const py::tuple a = t[0];
                        auto r = std::make_unique<PyReplay>(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9],
                                                            a[10]);
                        r->set_state(t[1]);
                        return r;
                      }));
}

}  // namespace rlblocks::bindings
