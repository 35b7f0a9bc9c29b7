// Binding for hindsight relabelling (rlblocks/her.hpp) on a _core.ReplayCore: validates the
// settings and arrays with the GIL held, then relabels with the GIL released and the
// buffer's lock held. A call that raises has written nothing. The messages equal those of
// the numpy twin (rlblocks._reference.her).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "bindings.hpp"
#include "rlblocks/her.hpp"
#include "rlblocks/replay.hpp"

namespace py = pybind11;

namespace rlblocks::bindings {
namespace {

// An int (not a bool) in [lo, hi]; ValueError "<name>: expected an int in [lo, hi]<why>, got <repr>".
std::int64_t int_in(const py::handle& obj, const std::string& name, std::int64_t lo, std::int64_t hi,
                    const std::string& why = "") {
  const std::string msg =
      name + ": expected an int in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]" + why + ", got ";
  if (py::isinstance<py::bool_>(obj) || !py::hasattr(obj, "__index__")) {
    throw py::value_error(msg + std::string(py::repr(obj)));
  }
  py::int_ v(py::reinterpret_borrow<py::object>(obj));
  int overflow = 0;
  const long long r = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
  if (r == -1 && PyErr_Occurred()) throw py::error_already_set();
  if (overflow != 0 || r < lo || r > hi) throw py::value_error(msg + std::string(py::repr(obj)));
  return static_cast<std::int64_t>(r);
}

py::array her_relabel(const py::object& replay, const py::object& strategy, const py::object& achieved_offset,
                      const py::object& desired_offset, const py::object& goal_size, const py::object& indices,
                      const py::object& u, const py::object& n_relabel, const py::object& obs,
                      const py::object& next_obs) {
  if (!py::hasattr(py::module_::import("rlblocks._core"), "ReplayCore") ||
      !py::isinstance(replay, py::module_::import("rlblocks._core").attr("ReplayCore"))) {
    throw py::value_error(std::string("replay: expected a ReplayCore, got ") + Py_TYPE(replay.ptr())->tp_name);
  }
  const auto n_step = replay.attr("n_step").cast<std::int64_t>();
  if (n_step != 1) {
    throw py::value_error(
        "replay: hindsight relabelling needs n_step=1 (a relabelled reward is one step's), got n_step=" +
        std::to_string(n_step));
  }
  const auto k = replay.attr("frame_stack").cast<std::int64_t>();
  if (k != 0) {
    throw py::value_error(
        "replay: hindsight relabelling needs observations stored whole (frame_stack=0), got frame_stack=" +
        std::to_string(k));
  }
  Shape obs_shape;
  for (py::handle d : py::tuple(replay.attr("obs_shape"))) obs_shape.push_back(d.cast<std::int64_t>());
  if (obs_shape.size() != 1) {
    throw py::value_error(
        "replay: hindsight relabelling needs flat observations (an obs_shape of one dimension), got " +
        shape_str(obs_shape));
  }
  const std::int64_t D = obs_shape[0];
  HerStrategy st = HerStrategy::kFuture;
  const std::string s = py::isinstance<py::str>(strategy) ? strategy.cast<std::string>() : std::string();
  if (s == "future") st = HerStrategy::kFuture;
  else if (s == "final") st = HerStrategy::kFinal;
  else if (s == "episode") st = HerStrategy::kEpisode;
  else {
    throw py::value_error("strategy: expected 'future', 'final' or 'episode', got " + std::string(py::repr(strategy)));
  }
  const std::int64_t G =
      int_in(goal_size, "goal_size", 1, D, " (the goal's columns; observations have " + std::to_string(D) + ")");
  const std::string where = " (the goal's first column; observations have " + std::to_string(D) + ")";
  const std::int64_t ag = int_in(achieved_offset, "achieved_offset", 0, D - G, where);
  const std::int64_t dg = int_in(desired_offset, "desired_offset", 0, D - G, where);
  py::array ri = py::array::ensure(indices);
  if (!ri) PyErr_Clear();
  if (!ri || ri.ndim() != 1 || !ri.dtype().equal(py::dtype::of<std::int64_t>())) {
    throw py::value_error("indices: expected a 1-d int64 array, got " + describe(indices));
  }
  const auto B = static_cast<std::int64_t>(ri.size());
  auto idx = py::array_t<std::int64_t, py::array::c_style>::ensure(ri);
  py::array ru = py::array::ensure(u);
  if (!ru) PyErr_Clear();
  if (!ru || !ru.dtype().equal(py::dtype::of<double>()) || array_shape(ru) != Shape{B}) {
    throw py::value_error("u: expected a float64 array of shape (" + std::to_string(B) + ",), got " + describe(u));
  }
  auto uu = py::array_t<double, py::array::c_style>::ensure(ru);
  const double* pu = uu.data();
  for (std::int64_t i = 0; i < B; ++i) {
    if (!(pu[i] >= 0.0 && pu[i] < 1.0)) {
      throw py::value_error("u[" + std::to_string(i) + "] = " + std::string(py::repr(py::float_(pu[i]))) +
                            ": expected a number in [0, 1)");
    }
  }
  const std::int64_t n = int_in(n_relabel, "n_relabel", 0, B, " (the batch's rows)");
  const py::dtype dt = replay.attr("obs_dtype").cast<py::dtype>();
  py::array o = checked_out(obs, dt, Shape{B, D}, "her_relabel: obs");
  py::array no = checked_out(next_obs, dt, Shape{B, D}, "her_relabel: next_obs");
  if (overlaps(o, no)) throw py::value_error("her_relabel: next_obs must not overlap obs");
  py::array_t<std::int64_t> goals(B);
  const std::int64_t* pi = idx.data();
  auto* po = static_cast<unsigned char*>(o.mutable_data());
  auto* pn = static_cast<unsigned char*>(no.mutable_data());
  std::int64_t* pg = goals.mutable_data();
  const auto elem = static_cast<std::int64_t>(dt.itemsize());
  std::int64_t bad = -1, bad_value = 0, entries = 0;
  with_replay_core(replay, [&](const ReplayCore& core) {
    entries = core.entries();
    for (std::int64_t i = 0; i < B; ++i) {
      if (!core.is_sampleable(pi[i])) {
        bad = i;
        bad_value = pi[i];
        return;
      }
    }
    const ReplayConfig& c = core.config();
    const HerStorage hs{core.frame_data(), core.flag_data(), core.count_data(), c.per_env, c.frame_bytes};
    const HerGoalSlots slots{ag * elem, dg * elem, G * elem};
    her_relabel(hs, slots, st, pi, pu, B, n, po, pn, D * elem, pg);
  });
  if (bad >= 0) {
    throw py::value_error("indices[" + std::to_string(bad) + "] = " + std::to_string(bad_value) +
                          ": not a sampleable step of the buffer (leaves are in [0, " + std::to_string(entries) +
                          "); overwritten since it was sampled, or not complete)");
  }
  return std::move(goals);
}

}  // namespace

void register_her(py::module_& m) {
  m.def("her_relabel", &her_relabel, py::arg("replay"), py::arg("strategy"), py::arg("achieved_offset"),
        py::arg("desired_offset"), py::arg("goal_size"), py::arg("indices"), py::arg("u"), py::arg("n_relabel"),
        py::arg("obs"), py::arg("next_obs"),
        "Hindsight relabelling of a sampled batch of `replay` (n_step=1, flat observations): rows b < n_relabel "
        "get, at desired_offset, the achieved goal (at achieved_offset) of a step of their episode chosen by "
        "`strategy` ('future', 'final', 'episode') with the uniforms u, in obs and next_obs (written in place). "
        "Returns the goal steps' leaves (-1: row left alone).");
}

}  // namespace rlblocks::bindings
