// Binding for the frame stacker: validates frames / env ids / masks / out= with the GIL
// held, then runs the ring-buffer kernel with the GIL released. A call that raises has not
// touched the stacker's state or the caller's out= buffer.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "rlblocks/checked.hpp"
#include "rlblocks/frame_stack.hpp"

namespace py = pybind11;

namespace rlblocks::bindings {
namespace {

class PyFrameStacker {
 public:
  PyFrameStacker(const py::object& num_envs, const py::object& k, const py::object& frame_shape,
                 const py::object& dtype, bool channels_last)
      : num_envs_(to_int(num_envs, "num_envs")), k_(to_int(k, "k")), channels_last_(channels_last) {
    if (num_envs_ < 1) throw py::value_error("num_envs: expected >= 1, got " + std::to_string(num_envs_));
    if (k_ < 1 || k_ > FrameStack::kMaxK) {
      throw py::value_error("k: expected 1 <= k <= " + std::to_string(FrameStack::kMaxK) + ", got " +
                            std::to_string(k_));
    }
    if (py::isinstance<py::str>(frame_shape) || !py::isinstance<py::sequence>(frame_shape)) {
      throw py::value_error("frame_shape: expected (H, W) or (H, W, C), got " + std::string(py::repr(frame_shape)));
    }
    for (py::handle d : py::reinterpret_borrow<py::sequence>(frame_shape))
      frame_shape_.push_back(to_int(d, "frame_shape"));
    bool positive = true;
    for (auto d : frame_shape_) positive = positive && d >= 1;
    if ((frame_shape_.size() != 2 && frame_shape_.size() != 3) || !positive) {
      throw py::value_error("frame_shape: expected (H, W) or (H, W, C) with positive sizes, got " +
                            shape_str(frame_shape_));
    }
    dtype_ = py::dtype::from_args(dtype);
    const char kind = dtype_.kind();
    const auto itemsize = static_cast<std::int64_t>(dtype_.itemsize());
    const bool native = dtype_.byteorder() != '>' || itemsize == 1;
    const bool sized = itemsize == 1 || itemsize == 2 || itemsize == 4 || itemsize == 8;
    if (!(kind == 'b' || kind == 'i' || kind == 'u' || kind == 'f') || !sized || !native) {
      throw py::value_error("dtype: expected a native bool/int/uint/float dtype of 1, 2, 4 or 8 bytes, got " +
                            std::string(py::str(dtype_)));
    }
    const std::int64_t h = frame_shape_[0], w = frame_shape_[1];
    const std::int64_t c = frame_shape_.size() == 3 ? frame_shape_[2] : 1;
    const std::int64_t dims[] = {num_envs_, k_, h, w, c, itemsize};
    const std::int64_t bytes = checked_product(dims, 6, "FrameStacker: num_envs * k * H * W * C * itemsize");
    if (bytes > (std::int64_t{1} << 40)) {
      throw py::value_error("FrameStacker: num_envs * k * frame bytes = " + std::to_string(bytes) +
                            " is too large (at most 2**40 bytes)");
    }
    const std::int64_t kc = checked_mul(k_, c, "FrameStacker: k * C");
    obs_shape_ = channels_last_ ? Shape{h, w, kc} : Shape{kc, h, w};
    stack_ = std::make_unique<FrameStack>(num_envs_, k_, h, w, c, itemsize, channels_last_);
  }

  py::object reset(const py::object& frames, const py::object& env_ids, const py::object& out) {
    std::vector<std::int64_t> ids;
    if (env_ids.is_none()) {
      ids.resize(static_cast<std::size_t>(num_envs_));
      for (std::int64_t i = 0; i < num_envs_; ++i) ids[static_cast<std::size_t>(i)] = i;
    } else {
      ids = parse_ids(env_ids);
    }
    const auto n = static_cast<std::int64_t>(ids.size());
    py::array f = checked_frames(frames, n, env_ids.is_none() ? "frames" : "frames (one per env id)");
    py::array o = out_array(out, n, f);
    auto* dst = o ? static_cast<unsigned char*>(o.mutable_data()) : nullptr;
    const auto* src = static_cast<const unsigned char*>(f.data());
    if (n * stack_->stacked_bytes() >= kReleaseGilBytes) {
      py::gil_scoped_release release;
      stack_->reset(ids.data(), n, src, dst);
    } else {
      stack_->reset(ids.data(), n, src, dst);
    }
    return std::move(o);
  }

  py::object push(const py::object& self, const py::object& frames, const py::object& reset_mask, const py::object& out,
                  bool copy) {
    if (!copy && channels_last_) {
      throw py::value_error(
          "copy=False needs channels_last=False: channel-last stacks interleave the frames, "
          "so they exist only as copies");
    }
    if (!copy && !out.is_none()) throw py::value_error("out= and copy=False exclude each other");
    py::array f = checked_frames(frames, num_envs_, "frames");
    py::array_t<bool> mask;
    const std::uint8_t* mask_ptr = nullptr;
    if (!reset_mask.is_none()) {
      py::array raw = py::array::ensure(reset_mask);
      if (!raw) PyErr_Clear();
      if (!raw || raw.dtype().kind() != 'b' || array_shape(raw) != Shape{num_envs_}) {
        const std::string got =
            raw ? std::string(py::str(raw.dtype())) + " array of shape " + shape_str(array_shape(raw))
                : std::string(py::repr(reset_mask));
        throw py::value_error("reset_mask: expected a bool array of shape (" + std::to_string(num_envs_) + ",), got " +
                              got);
      }
      mask = py::array_t < bool, py::array::c_style | py::array::forcecast > ::ensure(raw);
      mask_ptr = reinterpret_cast<const std::uint8_t*>(mask.data());
    }
    const std::int64_t unready = stack_->first_unready(mask_ptr);
    if (unready >= 0) {
      throw py::value_error("env " + std::to_string(unready) +
                            " has no frames yet: call reset() for it first, or flag it in reset_mask");
    }
    py::array o = copy ? out_array(out, num_envs_, f) : py::array();
    auto* dst = copy ? static_cast<unsigned char*>(o.mutable_data()) : nullptr;
    const auto* src = static_cast<const unsigned char*>(f.data());
    if (num_envs_ * stack_->stacked_bytes() >= kReleaseGilBytes) {
      py::gil_scoped_release release;
      stack_->push(src, mask_ptr, dst);
    } else {
      stack_->push(src, mask_ptr, dst);
    }
    if (!copy) return stacks_view(self);
    return std::move(o);
  }

  // The stacks in place (channels-first ring): a read-only (num_envs, k*C, H, W) view that
  // keeps `self` alive.
  py::array stacks_view(const py::object& self) const {
    const auto item = static_cast<std::int64_t>(dtype_.itemsize());
    const std::int64_t h = obs_shape_[1], w = obs_shape_[2];
    const std::vector<py::ssize_t> shape{num_envs_, obs_shape_[0], h, w};
    const std::vector<py::ssize_t> strides{stack_->env_stride_bytes(), h * w * item, w * item, item};
    py::array view(dtype_, shape, strides, stack_->stacks_data(), self);
    view.attr("setflags")(py::arg("write") = false);
    return view;
  }

  py::object observation(const py::object& out) {
    const std::int64_t unready = stack_->first_unready(nullptr);
    if (unready >= 0)
      throw py::value_error("env " + std::to_string(unready) + " has no frames yet: call reset() first");
    py::array o = out_array(out, num_envs_, py::array());
    auto* dst = static_cast<unsigned char*>(o.mutable_data());
    if (num_envs_ * stack_->stacked_bytes() >= kReleaseGilBytes) {
      py::gil_scoped_release release;
      stack_->observe(dst);
    } else {
      stack_->observe(dst);
    }
    return std::move(o);
  }

  // {"frames": (num_envs, k, *frame_shape) oldest first, "ready": bool (num_envs,)}.
  py::dict get_state() const {
    py::array frames(dtype_, with_lead(num_envs_, with_lead(k_, frame_shape_)));
    py::array_t<bool> ready(num_envs_);
    stack_->save(static_cast<unsigned char*>(frames.mutable_data()),
                 reinterpret_cast<std::uint8_t*>(ready.mutable_data()));
    py::dict d;
    d["frames"] = frames;
    d["ready"] = ready;
    return d;
  }

  // Loads get_state() output after checking all of it (nothing changes on a ValueError).
  void set_state(const py::object& obj) {
    if (!py::isinstance<py::dict>(obj)) {
      throw py::value_error(std::string("state: expected a dict, got ") + Py_TYPE(obj.ptr())->tp_name);
    }
    const auto d = py::reinterpret_borrow<py::dict>(obj);
    for (const char* key : {"frames", "ready"}) {
      if (!d.contains(key)) throw py::value_error(std::string("state: missing key '") + key + "'");
    }
    const Shape want = with_lead(num_envs_, with_lead(k_, frame_shape_));
    const py::object frames_obj = d["frames"], ready_obj = d["ready"];
    if (!py::isinstance<py::array>(frames_obj) || !frames_obj.cast<py::array>().dtype().equal(dtype_) ||
        array_shape(frames_obj.cast<py::array>()) != want) {
      throw py::value_error("state['frames']: expected a " + std::string(py::str(dtype_)) + " array of shape " +
                            shape_str(want) + " (num_envs, k, *frame_shape), got " + describe(frames_obj));
    }
    if (!py::isinstance<py::array>(ready_obj) || ready_obj.cast<py::array>().dtype().kind() != 'b' ||
        array_shape(ready_obj.cast<py::array>()) != Shape{num_envs_}) {
      throw py::value_error("state['ready']: expected a bool array of shape " + shape_str(Shape{num_envs_}) + ", got " +
                            describe(ready_obj));
    }
    const auto frames = py::array::ensure(frames_obj, py::array::c_style);
    const auto ready = py::array_t<bool, py::array::c_style>::ensure(ready_obj);
    if (!frames || !ready) throw py::error_already_set();
    const auto* bytes = static_cast<const unsigned char*>(frames.data());
    const auto* flags = reinterpret_cast<const std::uint8_t*>(ready.data());
    const std::int64_t env_bytes = stack_->stacked_bytes();
    for (std::int64_t b = 0; b < num_envs_; ++b) {
      if (flags[b]) continue;
      const unsigned char* env = bytes + b * env_bytes;
      if (std::any_of(env, env + env_bytes, [](unsigned char c) { return c != 0; })) {
        throw py::value_error("state['frames'][" + std::to_string(b) + "]: env " + std::to_string(b) +
                              " is not ready (state['ready'][" + std::to_string(b) +
                              "] is False) but holds frames; an env never reset holds zeros");
      }
    }
    stack_->restore(bytes, flags);
  }

  py::tuple getstate() const {
    return py::make_tuple(num_envs_, k_, to_tuple(frame_shape_), dtype_, channels_last_, get_state());
  }

  std::int64_t num_envs() const { return num_envs_; }
  std::int64_t k() const { return k_; }
  bool channels_last() const { return channels_last_; }
  py::dtype dtype() const { return dtype_; }
  py::tuple frame_shape() const { return to_tuple(frame_shape_); }
  py::tuple observation_shape() const { return to_tuple(obs_shape_); }

 private:
  static py::tuple to_tuple(const Shape& s) {
    py::tuple t(s.size());
    for (std::size_t i = 0; i < s.size(); ++i) t[i] = py::int_(s[i]);
    return t;
  }

  std::vector<std::int64_t> parse_ids(const py::object& env_ids) const {
    py::array raw = py::array::ensure(env_ids);
    if (!raw) PyErr_Clear();
    const char kind = raw ? raw.dtype().kind() : '?';
    const bool empty_list = raw && raw.ndim() == 1 && raw.size() == 0;
    if (!raw || raw.ndim() != 1 || !(kind == 'i' || kind == 'u' || empty_list)) {
      throw py::value_error("env_ids: expected a 1-d sequence of ints in [0, " + std::to_string(num_envs_) + "), got " +
                            std::string(py::repr(env_ids)));
    }
    auto arr = py::array_t < std::int64_t, py::array::c_style | py::array::forcecast > ::ensure(raw);
    std::vector<std::int64_t> ids(arr.data(), arr.data() + arr.size());
    std::vector<char> seen(static_cast<std::size_t>(num_envs_), 0);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const std::int64_t id = ids[i];
      if (id < 0 || id >= num_envs_) {
        throw py::value_error("env_ids[" + std::to_string(i) + "] = " + std::to_string(id) + " is out of range [0, " +
                              std::to_string(num_envs_) + ")");
      }
      if (seen[static_cast<std::size_t>(id)]) {
        throw py::value_error("env_ids: env " + std::to_string(id) + " appears more than once");
      }
      seen[static_cast<std::size_t>(id)] = 1;
    }
    return ids;
  }

  // frames as a C-contiguous array of the stacker's dtype with shape (n, *frame_shape).
  py::array checked_frames(const py::object& frames, std::int64_t n, const char* name) const {
    py::array raw = py::array::ensure(frames);
    if (!raw) {
      PyErr_Clear();
      throw py::value_error(std::string(name) + ": expected an array, got " + std::string(py::repr(frames)));
    }
    const Shape want = with_lead(n, frame_shape_);
    if (array_shape(raw) != want) {
      throw py::value_error(std::string(name) + ": expected shape " + shape_str(want) + ", got " +
                            shape_str(array_shape(raw)));
    }
    if (!raw.dtype().equal(dtype_)) {
      const bool safe = py::module_::import("numpy").attr("can_cast")(raw.dtype(), dtype_, "safe").cast<bool>();
      if (!safe) {
        throw py::value_error(std::string(name) + ": dtype " + std::string(py::str(raw.dtype())) +
                              " cannot be safely cast to the stacker's dtype " + std::string(py::str(dtype_)));
      }
    }
    const int flags = py::array::c_style | py::array::forcecast;
    py::object conv = py::reinterpret_steal<py::object>(py::detail::npy_api::get().PyArray_FromAny_(
        raw.ptr(), dtype_.inc_ref().ptr(), 0, 0, flags | py::detail::npy_api::NPY_ARRAY_ALIGNED_, nullptr));
    if (!conv) throw py::error_already_set();
    return py::reinterpret_borrow<py::array>(conv);
  }

  // out as a writeable C-contiguous array of (n, *obs_shape) and the stacker's dtype, not
  // overlapping `frames`; a new array when out is None.
  py::array out_array(const py::object& out, std::int64_t n, const py::array& frames) const {
    const Shape want = with_lead(n, obs_shape_);
    if (out.is_none()) return py::array(dtype_, want);
    const py::array a = bindings::checked_out(out, dtype_, want, "FrameStacker");
    if (frames && frames.nbytes() > 0 && a.nbytes() > 0 && overlaps(a, frames)) {
      throw py::value_error("FrameStacker: out overlaps frames; pass a separate output array");
    }
    return a;
  }

  std::int64_t num_envs_, k_;
  bool channels_last_;
  Shape frame_shape_, obs_shape_;
  py::dtype dtype_;
  std::unique_ptr<FrameStack> stack_;
};

}  // namespace

void register_frame_stack(py::module_& m) {
  py::class_<PyFrameStacker>(m, "FrameStacker", "Ring-buffer frame stacking for B envs x k frames.")
      .def(py::init<const py::object&, const py::object&, const py::object&, const py::object&, bool>(),
           py::arg("num_envs"), py::arg("k"), py::arg("frame_shape"), py::arg("dtype"), py::arg("channels_last"))
      .def_property_readonly("num_envs", &PyFrameStacker::num_envs)
      .def_property_readonly("k", &PyFrameStacker::k)
      .def_property_readonly("channels_last", &PyFrameStacker::channels_last)
      .def_property_readonly("dtype", &PyFrameStacker::dtype)
      .def_property_readonly("frame_shape", &PyFrameStacker::frame_shape)
      .def_property_readonly("observation_shape", &PyFrameStacker::observation_shape)
      .def("reset", &PyFrameStacker::reset, py::arg("frames"), py::arg("env_ids") = py::none(),
           py::arg("out") = py::none())
      .def(
          "push",
          [](const py::object& self, const py::object& frames, const py::object& reset_mask, const py::object& out,
             bool copy) { return self.cast<PyFrameStacker&>().push(self, frames, reset_mask, out, copy); },
          py::arg("frames"), py::arg("reset_mask") = py::none(), py::arg("out") = py::none(), py::arg("copy") = true)
      .def("observation", &PyFrameStacker::observation, py::arg("out") = py::none())
      .def("get_state", &PyFrameStacker::get_state)
      .def("set_state", &PyFrameStacker::set_state, py::arg("state"))
      .def(py::pickle([](const PyFrameStacker& s) { return s.getstate(); },
                      [](const py::tuple& t) {
                        if (t.size() != 6) throw py::value_error("FrameStacker: invalid pickled state");
                        auto s = std::make_unique<PyFrameStacker>(t[0], t[1], t[2], t[3], t[4].cast<bool>());
                        s->set_state(t[5]);
                        return s;
                      }));
}

}  // namespace rlblocks::bindings
