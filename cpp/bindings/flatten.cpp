// Binding for the flattening kernel: walks Python observations (GIL held) along a layout
// plan compiled once per space (flatten_layout.hpp), validates every value, and turns the
// walk into plain ops that `run_flatten` executes with the GIL released (flatten_execute.hpp).
// The walk itself is flatten_walk.hpp (core kinds), flatten_kinds.hpp (stacked sequences,
// Graph, Text, OneOf) and flatten_batched.hpp (a nest of batch arrays); this file holds the
// entry points and registers them.
//
// Nothing is written to the output before the whole batch has been validated, so a bad
// observation raises ValueError and leaves the caller's buffer untouched.
//
// Python code can run during the walk (a mapping's __getitem__, an element's __index__)
// and other threads run while the kernel does: every container is walked through a
// reference the walk owns (the items of lists and tuples are held before they are walked),
// and every array an op reads is kept alive until the call returns.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>

#include "bindings.hpp"
#include "flatten_batched.hpp"
#include "flatten_execute.hpp"
#include "flatten_kinds.hpp"
#include "flatten_read.hpp"
#include "flatten_walk.hpp"
#include "rlblocks/checked.hpp"
#include "rlblocks/flatten.hpp"

namespace py = pybind11;

namespace rlblocks::bindings {
namespace {

using namespace flatten_read;  // NOLINT: the collector, the readers and the ops' execution
using flatten_walk::Walker;

// ---------------------------------------------------------------- the plan

class FlattenPlan : public Walker {
 public:
  using Walker::Walker;

  py::array_t<float> transform(py::handle obs) {
    CollectorLease lease;
    Collector& c = *lease;
    c.begin_row();
    walk(root(), obs.ptr(), 0, c);
    c.begin_row();
    py::array_t<float> out(size());
    execute(c, out.mutable_data(), 1, size(), zero_fill());
    return out;
  }

  void write(py::handle obs, const py::handle& array, std::int64_t offset) {
    CollectorLease lease;
    Collector& c = *lease;
    ArrayView a;
    const bool ok = as_array(array.ptr(), a) && a.numeric && a.type == ElemType::F32 && a.contiguous &&
                    (py::detail::array_proxy(array.ptr())->flags & py::detail::npy_api::NPY_ARRAY_WRITEABLE_);
    if (!ok) throw py::value_error("write: array must be a writeable C-contiguous float32 ndarray");
    std::int64_t end = 0;  // offset + size, never wrapped
    if (offset < 0 || add_overflows(offset, size(), end) || end > a.numel) {
      throw py::value_error("write: offset " + std::to_string(offset) + " + size " + std::to_string(size()) +
                            " exceeds the array's " + std::to_string(a.numel) + " elements");
    }
    c.begin_row();
    walk(root(), obs.ptr(), 0, c);
    c.begin_row();
    float* dst = reinterpret_cast<float*>(a.data) + offset;
    detach_aliased_sources(c, dst, 1, size());
    execute(c, dst, 1, size(), zero_fill());
  }

  // A sequence of per-env observations -> (B, size).
  py::array_t<float> transform_list(py::handle obs_list, py::object out) {
    CollectorLease lease;
    Collector& c = *lease;
    const bool list_or_tuple = PyList_Check(obs_list.ptr()) || PyTuple_Check(obs_list.ptr());
    const py::object seq = list_or_tuple ? py::reinterpret_borrow<py::object>(obs_list) : snapshot(obs_list.ptr());
    const std::int64_t batch = static_cast<std::int64_t>(PySequence_Fast_GET_SIZE(seq.ptr()));
    const std::size_t first = c.hold_items(seq.ptr());
    const std::int64_t w = size();
    for (std::int64_t r = 0; r < batch; ++r) {
      c.begin_row();
      PathGuard g(c, nullptr, r);
      walk(root(), c.held(first + static_cast<std::size_t>(r)), checked_mul(r, w, "transform_batch: row offset"), c);
    }
    c.begin_row();
    py::array_t<float> result = output(out, batch);
    if (!out.is_none()) detach_aliased_sources(c, result.mutable_data(), batch, size());
    execute(c, result.mutable_data(), batch, size(), zero_fill());
    return result;
  }

  // A nested structure whose leaves carry a leading batch dimension -> (B, size).
  py::array_t<float> transform_batched(py::handle obs, py::object out) {
    CollectorLease lease;
    Collector& c = *lease;
    const std::int64_t batch = batch_size(root(), obs.ptr(), c);
    c.tag_rows = true;
    walk_batched(root(), obs.ptr(), 0, batch, c);
    py::array_t<float> result = output(out, batch);
    if (!out.is_none()) detach_aliased_sources(c, result.mutable_data(), batch, size());
    execute(c, result.mutable_data(), batch, size(), zero_fill());
    return result;
  }

 private:
  // ------------------------------------------------ execution

  py::array_t<float> output(const py::object& out, std::int64_t batch) const {
    if (out.is_none()) return py::array_t<float>({batch, size()});
    return py::reinterpret_borrow<py::array_t<float>>(
        checked_out(out, py::dtype::of<float>(), {batch, size()}, "transform_batch"));
  }

  // A tuple of the items of a sequence that is not a list or tuple (transform_list takes any).
  static py::tuple snapshot(PyObject* seq) {
    PyObject* t = PySequence_Tuple(seq);
    if (!t) throw py::error_already_set();
    return py::reinterpret_steal<py::tuple>(t);
  }
};

}  // namespace

void register_flatten(py::module_& m) {
  py::class_<FlattenPlan>(m, "FlattenPlan",
                          "A space compiled into a flat float32 layout (built by rlblocks.preprocessors).")
      .def(py::init<const py::list&, int>(), py::arg("nodes"), py::arg("root"))
      .def_property_readonly("size", &FlattenPlan::size)
      .def("transform", &FlattenPlan::transform, py::arg("obs"))
      .def("write", &FlattenPlan::write, py::arg("obs"), py::arg("array"), py::arg("offset"))
      .def("transform_list", &FlattenPlan::transform_list, py::arg("obs_list"), py::arg("out") = py::none())
      .def("transform_batched", &FlattenPlan::transform_batched, py::arg("obs"), py::arg("out") = py::none());
  m.def(
      "_flatten_scratch_bytes", [] { return thread_collector().capacity_bytes(); },
      "Bytes the calling thread keeps between flatten calls (capped; for tests).");
}

}  // namespace rlblocks::bindings
