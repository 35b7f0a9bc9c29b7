// The walk of a batched structure (see flatten_walk.hpp): a nest whose leaves carry a
// leading batch dimension. The batch size comes from the first leaf; Dicts and Tuples are
// walked once, leaves become column ops over all rows, and kinds without a batched form
// (sequences, graphs, text, OneOf) are walked row by row.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "flatten_walk.hpp"

namespace rlblocks::bindings::flatten_walk {

// ------------------------------------------------ batched structure

inline std::int64_t Walker::leading_dim(PyObject* obj, Collector& c) const {
  ArrayView a;
  if (as_array(obj, a)) {
    if (a.nd == 0) fail(c, "expected a leading batch dimension, got a 0-d array");
    return a.dims[0];
  }
  const Py_ssize_t n = PyObject_Length(obj);
  if (n < 0) {
    PyErr_Clear();
    fail(c, std::string("expected an array with a leading batch dimension, got ") + Py_TYPE(obj)->tp_name);
  }
  return n;
}

// The batch size, from the first leaf found depth-first (empty Dicts/Tuples skipped).
inline std::int64_t Walker::batch_size(const Node& nd, PyObject* obj, Collector& c) const {
  if (!nd.has_leaf) fail(c, "cannot infer the batch size of " + nd.label + ": it holds no values");
  if (nd.kind != Kind::Dict && nd.kind != Kind::Tuple) return leading_dim(obj, c);
  std::size_t i = 0;
  while (!child(nd, i).has_leaf) ++i;
  py::object v;
  if (nd.kind == Kind::Dict) {
    if (!PyDict_Check(obj) && !is_mapping(obj))
      fail(c, "expected a dict with keys " + keys_string(nd) + " for " + nd.label + ", got " + Py_TYPE(obj)->tp_name);
    v = py::reinterpret_steal<py::object>(PyObject_GetItem(obj, nd.keys[i].ptr()));
    if (!v) {
      if (!PyErr_ExceptionMatches(PyExc_KeyError)) throw py::error_already_set();
      PyErr_Clear();
      fail(c, "missing key " + short_repr(nd.keys[i].ptr()) + "; " + nd.label + " needs keys " + keys_string(nd));
    }
    PathGuard g(c, nd.keys[i].ptr(), 0);
    return batch_size(child(nd, i), v.ptr(), c);
  }
  if (!PyTuple_Check(obj) && !PyList_Check(obj))
    fail(c, "expected a tuple of " + std::to_string(nd.children.size()) + " items for " + nd.label + ", got " +
                Py_TYPE(obj)->tp_name);
  const Py_ssize_t len = PySequence_Fast_GET_SIZE(obj);
  if (static_cast<std::size_t>(len) != nd.children.size()) {
    fail(c,
         "expected " + std::to_string(nd.children.size()) + " items for " + nd.label + ", got " + std::to_string(len));
  }
  const std::size_t first = c.hold_items(obj);
  PathGuard g(c, nullptr, static_cast<std::int64_t>(i));
  return batch_size(child(nd, i), c.held(first + i), c);
}

inline void Walker::check_batch(Collector& c, std::int64_t got, std::int64_t batch) const {
  if (got != batch) {
    fail(c, "batch dimension " + std::to_string(got) + " differs from the batch size " + std::to_string(batch) +
                " of the first leaf");
  }
}

inline void Walker::walk_batched(const Node& nd, PyObject* obj, std::int64_t col, std::int64_t batch,
                                 Collector& c) const {
  switch (nd.kind) {
    case Kind::Dict: walk_dict(nd, obj, col, c, true, batch); return;
    case Kind::Tuple: walk_tuple(nd, obj, col, c, true, batch); return;
    case Kind::Repeated:
    case Kind::Graph:
    case Kind::Text:
    case Kind::OneOf: {  // a sequence of B per-env values (text: also an ndarray of str)
      const char* what = nd.kind == Kind::Graph   ? "graphs"
                         : nd.kind == Kind::Text  ? "str"
                         : nd.kind == Kind::OneOf ? "(branch index, value) pairs"
                         : nd.sequence            ? "sequences"
                                                  : "lists";
      if (nd.kind == Kind::Text) {
        ArrayView a;
        if (PyUnicode_Check(obj))
          fail(c, "expected a sequence of " + std::to_string(batch) + " str for " + nd.label + ", got a str");
        if (as_array(obj, a) && a.nd != 1) {
          fail(c, "expected shape " + shape_of({batch}, {}) + " for a batch of " + nd.label + ", got " + shape_of(a));
        }
      }
      py::object seq = py::reinterpret_steal<py::object>(PySequence_Tuple(obj));
      if (!seq) {
        PyErr_Clear();
        fail(c, "expected a sequence of " + std::to_string(batch) + " " + what + " for " + nd.label);
      }
      check_batch(c, PyTuple_GET_SIZE(seq.ptr()), batch);
      PyObject** items = batch ? &PyTuple_GET_ITEM(seq.ptr(), 0) : nullptr;
      const std::int64_t saved_row = c.row;
      for (std::int64_t r = 0; r < batch; ++r) {
        c.row = r;
        PathGuard g(c, nullptr, r);
        walk(nd, items[r],
             checked_add(checked_mul(r, size(), "transform_batch: row offset"), col, "transform_batch: row offset"), c);
      }
      c.row = saved_row;
      c.keepalive.push_back(seq);
      return;
    }
    case Kind::Discrete:
    case Kind::MultiDiscrete: {
      ArrayView a;
      if (!as_array(obj, a) || !a.numeric || !a.native) {
        py::object arr = convert_array(c, obj, false, "a batch of integers");
        as_array(arr.ptr(), a);
        if (!a.numeric) fail(c, "expected integers for " + nd.label + ", got " + short_repr(obj));
      }
      static const std::vector<std::int64_t> scalar;
      const std::vector<std::int64_t>& shape = nd.kind == Kind::MultiDiscrete ? nd.shape : scalar;
      if (a.nd > 0) check_batch(c, a.dims[0], batch);
      if (!has_shape(a, {batch}, shape)) {
        fail(c, "expected shape " + shape_of({batch}, shape) + " for a batch of " + nd.label + ", got " + shape_of(a));
      }
      if (!rows_contiguous(a)) {  // the kernel reads each row's k indices back to back
        py::object arr = convert_array(c, obj, false, "a batch of integers");
        as_array(arr.ptr(), a);
      }
      const std::int64_t k = nd.numel;
      if (batch > 0 && k > 0) {
        validate_indices(nd, a, batch, k, c);
        c.hold(obj);
        c.column_one_hots.push_back(ColumnOneHot{a.data, a.strides[0], col, nd.blocks(),
                                                 checked_narrow<std::int32_t>(k, "flatten: one-hot components"),
                                                 a.type});
      }
      return;
    }
    case Kind::Callback: copy_callback_result(nd, nd.batch_fn(py::handle(obj)), {batch}, col, c, true); return;
    case Kind::Box: {
      ArrayView a;
      if (!as_array(obj, a) || !rows_contiguous(a)) {
        py::object arr = convert_array(c, obj, true, "a batch of numbers");
        as_array(arr.ptr(), a);
      }
      if (a.nd > 0) check_batch(c, a.dims[0], batch);
      if (!has_shape(a, {batch}, nd.shape)) {
        fail(c,
             "expected shape " + shape_of({batch}, nd.shape) + " for a batch of " + nd.label + ", got " + shape_of(a));
      }
      if (nd.numel > 0 && batch > 0) {
        c.hold(obj);
        for (std::int64_t done = 0; done < nd.numel; done += kMaxOpElems) {  // int32 counts per op
          const std::int64_t n = std::min(kMaxOpElems, nd.numel - done);
          c.column_copies.push_back(ColumnCopy{a.data + done * elem_size(a.type), a.strides[0], col + done,
                                               static_cast<std::int32_t>(n), a.type, nd.map});
        }
      }
      return;
    }
  }
}

// Checks a (batch, k) block of indices against nd's ranges; the first bad element is
// reported with its full path.
inline void Walker::validate_indices(const Node& nd, const ArrayView& a, std::int64_t batch, std::int64_t k,
                                     Collector& c) const {
  const std::int64_t bad = first_bad_index(nd, a, batch, k);
  if (bad < 0) return;
  const std::int64_t r = bad / k, j = bad % k;
  const std::size_t ju = static_cast<std::size_t>(j);
  const IndexValue iv = read_index_elem(a.data + r * a.strides[0] + j * elem_size(a.type), a.type);
  std::int64_t idx[64];  // (row, *component index)
  idx[0] = r;
  std::int64_t rest = j;
  for (std::size_t d = a.nd; d-- > 1;) {
    idx[d] = rest % a.dims[d];
    rest /= a.dims[d];
  }
  for (std::size_t d = 0; d < a.nd; ++d) c.push_path(nullptr, idx[d]);
  checked_index(c, iv, nd.starts[ju], nd.nvec[ju], nd.component);
}

}  // namespace rlblocks::bindings::flatten_walk
