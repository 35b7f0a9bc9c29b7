// Binding for the flattening kernel: walks Python observations (GIL held) along a layout
// plan compiled once per space (flatten_layout.hpp), validates every value, and turns the
// walk into plain ops that `run_flatten` executes with the GIL released (flatten_execute.hpp).
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

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "flatten_execute.hpp"
#include "flatten_layout.hpp"
#include "flatten_read.hpp"
#include "rlblocks/checked.hpp"
#include "rlblocks/flatten.hpp"

namespace py = pybind11;

namespace rlblocks::bindings {
namespace {

using namespace flatten_read;    // NOLINT: the readers are this file's vocabulary
using namespace flatten_layout;  // NOLINT: and the layout's nodes

// ---------------------------------------------------------------- the plan

class FlattenPlan : public Layout {
 public:
  using Layout::Layout;

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
  // ------------------------------------------------ copies

  // Ops count elements in int32: a leaf of more elements is split into several ops.
  static constexpr std::int64_t kMaxOpElems = std::int64_t{1} << 30;

  static void add_row_copies(Collector& c, const char* src, ElemType type, std::int64_t dst, std::int64_t numel,
                             ValueMap map) {
    for (std::int64_t done = 0; done < numel; done += kMaxOpElems) {
      const std::int64_t n = std::min(kMaxOpElems, numel - done);
      c.add_copy(src + done * elem_size(type), dst + done, static_cast<std::int32_t>(n), type, map);
    }
  }

  // ------------------------------------------------ one observation

  void walk(const Node& nd, PyObject* obj, std::int64_t dst, Collector& c) const {
    switch (nd.kind) {
      case Kind::Dict: walk_dict(nd, obj, dst, c, false, 0); return;
      case Kind::Tuple: walk_tuple(nd, obj, dst, c, false, 0); return;
      case Kind::Repeated: walk_repeated(nd, obj, dst, c); return;
      case Kind::Discrete: {
        const std::int64_t off = fast_index_offset(obj, nd.start, nd.n);  // ints, numpy scalars
        if (off >= 0) {
          c.add_set(dst + off, 1.0f);
          return;
        }
        const IndexValue iv = read_index_scalar(c, obj, nd.label);
        c.add_set(dst + checked_index(c, iv, nd.start, nd.n, nd.label), 1.0f);
        return;
      }
      case Kind::MultiDiscrete: walk_multidiscrete(nd, obj, dst, c); return;
      case Kind::Box: walk_box(nd, obj, dst, c); return;
      case Kind::Callback: copy_callback_result(nd, nd.fn(py::handle(obj)), {}, dst, c); return;
      case Kind::Graph: walk_graph(nd, obj, dst, c); return;
      case Kind::Text: walk_text(nd, obj, dst, c); return;
      case Kind::OneOf: walk_oneof(nd, obj, dst, c); return;
    }
  }

  // Copies a callback's result (validated: float32 with `size` values per item).
  void copy_callback_result(const Node& nd, py::object result, std::initializer_list<std::int64_t> lead,
                            std::int64_t dst, Collector& c, bool column = false) const {
    ArrayView a;
    if (!as_array(result.ptr(), a) || !a.contiguous || a.type != ElemType::F32 ||
        a.numel != checked_mul(nd.size, column ? *lead.begin() : 1, "flatten: callback result size") ||
        (column && (a.nd == 0 || a.dims[0] != *lead.begin()))) {
      fail(c, "the preprocessor of " + nd.label + " returned " + short_repr(result.ptr()) +
                  ", expected a C-contiguous float32 array with " + std::to_string(nd.size) + " values per item");
    }
    c.keepalive.push_back(result);
    if (nd.size == 0) return;
    if (column) {
      const std::int64_t row_bytes = checked_mul(nd.size, 4, "flatten: callback row bytes");
      for (std::int64_t done = 0; done < nd.size; done += kMaxOpElems) {  // int32 counts per op
        const std::int64_t n = std::min(kMaxOpElems, nd.size - done);
        c.column_copies.push_back(ColumnCopy{a.data + done * 4, row_bytes, dst + done, static_cast<std::int32_t>(n),
                                             a.type, ValueMap::Identity});
      }
    } else {
      add_row_copies(c, a.data, a.type, dst, nd.size, ValueMap::Identity);
    }
  }

  // Dict/Tuple children: per env (batched=false) or batched structure.
  void walk_child(const Node& ch, PyObject* v, std::int64_t dst, Collector& c, bool batched, std::int64_t batch) const {
    if (batched) walk_batched(ch, v, dst, batch, c);
    else walk(ch, v, dst, c);
  }

  void walk_dict(const Node& nd, PyObject* obj, std::int64_t dst, Collector& c, bool batched,
                 std::int64_t batch) const {
    // a dict, or a subclass that does not override __getitem__: read without calling Python
    const bool is_dict =
        PyDict_Check(obj) && Py_TYPE(obj)->tp_as_mapping->mp_subscript == PyDict_Type.tp_as_mapping->mp_subscript;
    if (!is_dict && !is_mapping(obj)) {
      fail(c, "expected a dict with keys " + keys_string(nd) + " for " + nd.label + ", got " + Py_TYPE(obj)->tp_name);
    }
    // All values are fetched (and owned) before any is walked: walking one may run code
    // that changes the mapping.
    const std::size_t nkeys = nd.keys.size();
    std::vector<py::object> heap;
    py::object stack[8];
    py::object* values = stack;
    if (nkeys > 8) {
      heap.resize(nkeys);
      values = heap.data();
    }
    // A dict built in the space's key order from the same key objects (what samples and
    // most envs produce) is read in one pass, comparing keys by identity; lookups otherwise.
    bool in_order = is_dict;
    Py_ssize_t pos = 0;
    for (std::size_t i = 0; i < nkeys; ++i) {
      PyObject* key = nd.keys[i].ptr();
      py::object& v = values[i];
      if (is_dict) {
        PyObject *k = nullptr, *item = nullptr;
        if (in_order && PyDict_Next(obj, &pos, &k, &item) && k == key) {
          v = py::reinterpret_borrow<py::object>(item);
          continue;
        }
        in_order = false;
        item = PyDict_GetItemWithError(obj, key);
        if (!item && PyErr_Occurred()) throw py::error_already_set();
        v = py::reinterpret_borrow<py::object>(item);
      } else {
        v = py::reinterpret_steal<py::object>(PyObject_GetItem(obj, key));
        if (!v) {
          if (!PyErr_ExceptionMatches(PyExc_KeyError)) throw py::error_already_set();
          PyErr_Clear();
        }
      }
      if (!v) {
        fail(c, "missing key " + short_repr(key) + "; " + nd.label + " needs keys " + keys_string(nd));
      }
    }
    const Py_ssize_t have = is_dict ? PyDict_GET_SIZE(obj) : PyObject_Length(obj);
    if (have < 0) throw py::error_already_set();
    if (static_cast<std::size_t>(have) != nkeys) {
      fail(c, "unexpected keys " + extra_keys(nd, obj) + "; " + nd.label + " has keys " + keys_string(nd));
    }
    for (std::size_t i = 0; i < nkeys; ++i) {
      PathGuard g(c, nd.keys[i].ptr(), 0);
      walk_child(child(nd, i), values[i].ptr(), dst + nd.child_offsets[i], c, batched, batch);
    }
  }

  void walk_tuple(const Node& nd, PyObject* obj, std::int64_t dst, Collector& c, bool batched,
                  std::int64_t batch) const {
    if (!PyTuple_Check(obj) && !PyList_Check(obj)) {
      fail(c, "expected a tuple of " + std::to_string(nd.children.size()) + " items for " + nd.label + ", got " +
                  Py_TYPE(obj)->tp_name);
    }
    const Py_ssize_t len = PySequence_Fast_GET_SIZE(obj);
    if (static_cast<std::size_t>(len) != nd.children.size()) {
      fail(c, "expected " + std::to_string(nd.children.size()) + " items for " + nd.label + ", got " +
                  std::to_string(len));
    }
    const std::size_t first = c.hold_items(obj);
    for (std::size_t i = 0; i < nd.children.size(); ++i) {
      PathGuard g(c, nullptr, static_cast<std::int64_t>(i));
      walk_child(child(nd, i), c.held(first + i), dst + nd.child_offsets[i], c, batched, batch);
    }
  }

  // How many items of a list of `len` are kept: all, or max_len for a truncated sequence;
  // a longer list is a ValueError.
  std::int64_t kept_length(const Node& nd, std::int64_t len, Collector& c) const {
    if (len <= nd.max_len) return len;
    if (!nd.sequence) {
      fail(c, "list of length " + std::to_string(len) + " is longer than max_len=" + std::to_string(nd.max_len) +
                  " of " + nd.label);
    }
    if (nd.truncate) return nd.max_len;
    fail(c, "sequence of length " + std::to_string(len) +
                " is longer than sequence_max_len=" + std::to_string(nd.max_len) +
                " (raise sequence_max_len in the model config, or set sequence_truncate=True)");
  }

  void walk_repeated(const Node& nd, PyObject* obj, std::int64_t dst, Collector& c) const {
    const Node& ch = child(nd, 0);
    if (nd.stack && is_stacked(ch, obj)) {
      walk_stacked(nd, obj, dst, c);
      return;
    }
    const std::string what = nd.sequence ? "sequence" : "list";
    ArrayView a;
    const bool is_array = as_array(obj, a);
    if (!is_array && !PyList_Check(obj) && !PyTuple_Check(obj)) {
      fail(c, "expected a " + what + " of at most " + std::to_string(nd.max_len) + " items for " + nd.label + ", got " +
                  Py_TYPE(obj)->tp_name);
    }
    const std::int64_t len = is_array ? (a.nd == 0 ? -1 : a.dims[0]) : PySequence_Fast_GET_SIZE(obj);
    if (len < 0) fail(c, "expected a " + what + " for " + nd.label + ", got a 0-d array");
    const std::int64_t used = kept_length(nd, len, c);
    c.add_set(dst, static_cast<float>(used));
    if (is_array && ch.kind == Kind::Box && len > 0) {  // (len, *child_shape) in one copy
      walk_box(ch, obj, dst + 1, c, len, used);
      return;
    }
    const std::size_t first = is_array ? 0 : c.hold_items(obj);
    for (std::int64_t i = 0; i < used; ++i) {
      PyObject* item;
      if (is_array) {
        item = PySequence_GetItem(obj, static_cast<Py_ssize_t>(i));
        if (!item) throw py::error_already_set();
        c.keepalive.push_back(py::reinterpret_steal<py::object>(item));
      } else {
        item = c.held(first + static_cast<std::size_t>(i));
      }
      PathGuard g(c, nullptr, i);
      walk(ch, item, dst + 1 + i * ch.size, c);
    }
  }

  // ------------------------------------------------ stacked sequences

  // Whether `obj` is the stacked form of a Sequence(stack=True) of Dicts / Tuples: a
  // mapping (Dict items) or a tuple (Tuple items) of arrays with a leading length dim.
  static bool is_stacked(const Node& ch, PyObject* obj) {
    if (ch.kind == Kind::Dict) return PyDict_Check(obj) || is_mapping(obj);
    return ch.kind == Kind::Tuple && PyTuple_Check(obj);
  }

  // The length of a stacked value (leading dim of a leaf's stacked values).
  std::int64_t stacked_leaf_length(PyObject* obj, Collector& c) const {
    ArrayView a;
    if (as_array(obj, a)) {
      if (a.nd == 0) fail(c, "expected stacked values with a leading length dimension, got a 0-d array");
      return a.dims[0];
    }
    if (PyList_Check(obj) || PyTuple_Check(obj)) return PySequence_Fast_GET_SIZE(obj);
    fail(c, std::string("expected stacked values with a leading length dimension, got ") + Py_TYPE(obj)->tp_name);
  }

  // The item count of a stacked Dict / Tuple value: its first leaf's leading dim.
  std::int64_t stacked_length(const Node& ch, PyObject* obj, Collector& c) const {
    if (!ch.has_leaf) fail(c, "cannot infer the length of stacked " + ch.label + ": it holds no values");
    if (ch.kind != Kind::Dict && ch.kind != Kind::Tuple) return stacked_leaf_length(obj, c);
    std::size_t i = 0;
    while (!child(ch, i).has_leaf) ++i;
    if (ch.kind == Kind::Dict) {
      const std::vector<py::object> values = stacked_dict_values(ch, obj, c);
      PathGuard g(c, ch.keys[i].ptr(), 0);
      return stacked_length(child(ch, i), values[i].ptr(), c);
    }
    check_stacked_tuple(ch, obj, c);
    py::object item = py::reinterpret_borrow<py::object>(PySequence_Fast_GET_ITEM(obj, static_cast<Py_ssize_t>(i)));
    PathGuard g(c, nullptr, static_cast<std::int64_t>(i));
    return stacked_length(child(ch, i), item.ptr(), c);
  }

  // The values of a stacked Dict, in key order (all keys present, no others).
  std::vector<py::object> stacked_dict_values(const Node& ch, PyObject* obj, Collector& c) const {
    if (!PyDict_Check(obj) && !is_mapping(obj)) {
      fail(c, "expected a dict of stacked values with keys " + keys_string(ch) + " for " + ch.label + ", got " +
                  Py_TYPE(obj)->tp_name);
    }
    std::vector<py::object> values;
    for (const py::object& key : ch.keys) {
      py::object v = py::reinterpret_steal<py::object>(PyObject_GetItem(obj, key.ptr()));
      if (!v) {
        if (!PyErr_ExceptionMatches(PyExc_KeyError)) throw py::error_already_set();
        PyErr_Clear();
        fail(c, "missing key " + short_repr(key.ptr()) + "; " + ch.label + " needs keys " + keys_string(ch));
      }
      values.push_back(std::move(v));
    }
    const Py_ssize_t have = PyObject_Length(obj);
    if (have < 0) throw py::error_already_set();
    if (static_cast<std::size_t>(have) != ch.keys.size()) {
      fail(c, "unexpected keys " + extra_keys(ch, obj) + "; " + ch.label + " has keys " + keys_string(ch));
    }
    return values;
  }

  void check_stacked_tuple(const Node& ch, PyObject* obj, Collector& c) const {
    if (!PyTuple_Check(obj) && !PyList_Check(obj)) {
      fail(c, "expected a tuple of " + std::to_string(ch.children.size()) + " stacked values for " + ch.label +
                  ", got " + Py_TYPE(obj)->tp_name);
    }
    if (static_cast<std::size_t>(PySequence_Fast_GET_SIZE(obj)) != ch.children.size()) {
      fail(c, "expected " + std::to_string(ch.children.size()) + " stacked values for " + ch.label + ", got " +
                  std::to_string(PySequence_Fast_GET_SIZE(obj)));
    }
  }

  // The first `used` items of a stacked value of `len` items (every leaf indexed), as a list.
  py::list split_stacked(const Node& ch, PyObject* obj, std::int64_t len, std::int64_t used, Collector& c) const {
    py::list items(static_cast<py::ssize_t>(used));
    if (ch.kind == Kind::Dict || ch.kind == Kind::Tuple) {
      std::vector<py::object> values;
      if (ch.kind == Kind::Dict) {
        values = stacked_dict_values(ch, obj, c);
      } else {
        check_stacked_tuple(ch, obj, c);
        const std::size_t first = c.hold_items(obj);
        for (std::size_t j = 0; j < ch.children.size(); ++j) values.push_back(c.keepalive[first + j]);
      }
      std::vector<py::list> parts;
      for (std::size_t j = 0; j < values.size(); ++j) {
        PathGuard g(c, ch.kind == Kind::Dict ? ch.keys[j].ptr() : nullptr, static_cast<std::int64_t>(j));
        parts.push_back(split_stacked(child(ch, j), values[j].ptr(), len, used, c));
      }
      for (std::int64_t i = 0; i < used; ++i) {
        const auto iu = static_cast<py::ssize_t>(i);
        if (ch.kind == Kind::Dict) {
          py::dict d;
          for (std::size_t j = 0; j < parts.size(); ++j) d[ch.keys[j]] = parts[j][iu];
          items[iu] = d;
        } else {
          py::tuple t(static_cast<py::ssize_t>(parts.size()));
          for (std::size_t j = 0; j < parts.size(); ++j) t[static_cast<py::ssize_t>(j)] = parts[j][iu];
          items[iu] = t;
        }
      }
      return items;
    }
    const std::int64_t got = stacked_leaf_length(obj, c);
    if (got != len) {
      fail(c, "expected " + std::to_string(len) + " stacked items (the length of the first field), got " +
                  std::to_string(got));
    }
    for (std::int64_t i = 0; i < used; ++i) {
      PyObject* item = PySequence_GetItem(obj, static_cast<Py_ssize_t>(i));
      if (!item) throw py::error_already_set();
      PyList_SET_ITEM(items.ptr(), static_cast<Py_ssize_t>(i), item);  // steals; the new list's slots are empty
    }
    return items;
  }

  void walk_stacked(const Node& nd, PyObject* obj, std::int64_t dst, Collector& c) const {
    const Node& ch = child(nd, 0);
    const std::int64_t len = stacked_length(ch, obj, c);
    const std::int64_t used = kept_length(nd, len, c);
    c.add_set(dst, static_cast<float>(used));
    py::list items = split_stacked(ch, obj, len, used, c);
    c.keepalive.push_back(items);
    for (std::int64_t i = 0; i < used; ++i) {
      PathGuard g(c, nullptr, i);
      walk(ch, PyList_GET_ITEM(items.ptr(), static_cast<Py_ssize_t>(i)), dst + 1 + i * ch.size, c);
    }
  }

  // ------------------------------------------------ graphs

  // The leading count of a graph's nodes / edges / edge_links value (path: `.attr`).
  std::int64_t graph_count(const Node& nd, PyObject* obj, const char* attr, Collector& c) const {
    PathGuard g(c, attr);
    ArrayView a;
    if (as_array(obj, a)) {
      if (a.nd == 0) fail(c, std::string("expected an array of ") + attr + " for " + nd.label + ", got a 0-d array");
      return a.dims[0];
    }
    if (PyList_Check(obj) || PyTuple_Check(obj)) return PySequence_Fast_GET_SIZE(obj);
    fail(c, std::string("expected an array of ") + attr + " for " + nd.label + ", got " + Py_TYPE(obj)->tp_name);
  }

  // `count` items of `item` (nodes or edges) at dst: a Box array in one copy, others item by item.
  void walk_graph_items(const Node& item, PyObject* obj, std::int64_t count, std::int64_t dst, const char* attr,
                        Collector& c) const {
    PathGuard g(c, attr);
    if (item.kind == Kind::Box) {
      walk_box(item, obj, dst, c, count);
      return;
    }
    ArrayView a;
    const bool is_array = as_array(obj, a);
    const std::size_t first = is_array ? 0 : c.hold_items(obj);
    for (std::int64_t i = 0; i < count; ++i) {
      PyObject* v;
      if (is_array) {
        v = PySequence_GetItem(obj, static_cast<Py_ssize_t>(i));
        if (!v) throw py::error_already_set();
        c.keepalive.push_back(py::reinterpret_steal<py::object>(v));
      } else {
        v = c.held(first + static_cast<std::size_t>(i));
      }
      PathGuard gi(c, nullptr, i);
      walk(item, v, dst + i * item.size, c);
    }
  }

  void walk_graph(const Node& nd, PyObject* obj, std::int64_t dst, Collector& c) const {
    py::object parts[3];
    if (PyTuple_Check(obj) || PyList_Check(obj)) {  // GraphInstance is a NamedTuple
      const Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
      if (n != 3) {
        fail(c, "expected a GraphInstance(nodes, edges, edge_links) for " + nd.label + ", got a " +
                    Py_TYPE(obj)->tp_name + " of " + std::to_string(n) + " items");
      }
      for (Py_ssize_t i = 0; i < 3; ++i)
        parts[i] = py::reinterpret_borrow<py::object>(PySequence_Fast_GET_ITEM(obj, i));
    } else {
      const char* names[3] = {"nodes", "edges", "edge_links"};
      for (int i = 0; i < 3; ++i) {
        if (!PyObject_HasAttrString(obj, names[i])) {
          fail(c,
               "expected a GraphInstance(nodes, edges, edge_links) for " + nd.label + ", got " + Py_TYPE(obj)->tp_name);
        }
      }
      for (int i = 0; i < 3; ++i) {
        parts[i] = py::reinterpret_steal<py::object>(PyObject_GetAttrString(obj, names[i]));
        if (!parts[i]) throw py::error_already_set();
      }
    }
    for (const py::object& p : parts) c.keepalive.push_back(p);
    PyObject *nodes = parts[0].ptr(), *edges = parts[1].ptr(), *links = parts[2].ptr();
    const bool has_edges = nd.children.size() == 2;
    // counts first: nothing of the graph is read before they fit
    const std::int64_t n_nodes = graph_count(nd, nodes, "nodes", c);
    if (n_nodes > nd.max_nodes) {
      fail(c, "graph has " + std::to_string(n_nodes) +
                  " nodes, more than graph_max_nodes=" + std::to_string(nd.max_nodes));
    }
    std::int64_t n_edges = 0;
    if (has_edges) {  // gymnasium gives edges=None for a graph without edges
      n_edges = edges == Py_None ? 0 : graph_count(nd, edges, "edges", c);
    } else if (edges != Py_None) {
      PathGuard g(c, "edges");
      fail(c, "expected None for " + nd.label + " (it has no edge space), got " + Py_TYPE(edges)->tp_name);
    } else if (links != Py_None) {
      n_edges = graph_count(nd, links, "edge_links", c);
    }
    if (n_edges > nd.max_edges) {
      fail(c, "graph has " + std::to_string(n_edges) +
                  " edges, more than graph_max_edges=" + std::to_string(nd.max_edges));
    }
    if (has_edges) {
      const std::int64_t n_links = links == Py_None ? 0 : graph_count(nd, links, "edge_links", c);
      if (n_links != n_edges) {
        fail(c, "graph has " + std::to_string(n_edges) + " edges but " + std::to_string(n_links) + " edge_links");
      }
    }
    if (links != Py_None) walk_links(nd, links, n_nodes, n_edges, dst + nd.links_offset, c);
    walk_graph_items(child(nd, 0), nodes, n_nodes, dst + nd.nodes_offset, "nodes", c);
    if (has_edges && n_edges > 0) walk_graph_items(child(nd, 1), edges, n_edges, dst + nd.edges_offset, "edges", c);
    c.add_set(dst, static_cast<float>(n_nodes));
    c.add_set(dst + 1, static_cast<float>(n_edges));
  }

  // The (n_edges, 2) links: every one an integer node index below n_nodes, copied as floats.
  void walk_links(const Node& nd, PyObject* links, std::int64_t n_nodes, std::int64_t n_edges, std::int64_t dst,
                  Collector& c) const {
    PathGuard g(c, "edge_links");
    const std::vector<std::int64_t> pair{2};
    ArrayView a;
    if (!as_array(links, a) || !a.contiguous) {
      py::object arr = convert_array(c, links, false, ("integers of shape " + shape_of({n_edges}, pair)).c_str());
      as_array(arr.ptr(), a);
    } else {
      c.hold(links);
    }
    if (!has_shape(a, {n_edges}, pair)) {
      fail(c, "expected shape " + shape_of({n_edges}, pair) + " for the edge links of " + nd.label + ", got " +
                  shape_of(a));
    }
    // One typed pass over the (contiguous) links; only a bad one is read again, to name it.
    std::int64_t bad = -1;
    visit_elem_type(a.type, [&](auto tag) {
      const auto* v = reinterpret_cast<const decltype(tag)*>(a.data);
      for (std::int64_t k = 0; k < a.numel; ++k) {
        if (index_offset(v[k], 0, n_nodes) < 0) {
          bad = k;
          return;
        }
      }
    });
    if (bad >= 0) {
      const IndexValue iv = read_index_elem(a.data + bad * elem_size(a.type), a.type);
      PathGuard ge(c, nullptr, bad / 2);
      fail(c, "edge " + std::to_string(bad / 2) + " links node " + index_value_string(iv) + ", but the graph has " +
                  std::to_string(n_nodes) + " nodes" +
                  (n_nodes > 0 ? " (allowed 0.." + std::to_string(n_nodes - 1) + ")" : ""));
    }
    if (a.numel > 0) add_row_copies(c, a.data, a.type, dst, a.numel, ValueMap::Identity);
  }

  // ------------------------------------------------ text

  void walk_text(const Node& nd, PyObject* obj, std::int64_t dst, Collector& c) const {
    if (!PyUnicode_Check(obj)) fail(c, "expected a str for " + nd.label + ", got " + Py_TYPE(obj)->tp_name);
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(obj) < 0) throw py::error_already_set();  // a legacy str (a no-op since 3.12)
#endif
    const std::int64_t len = PyUnicode_GET_LENGTH(obj);
    std::int64_t used = len;
    if (len > nd.max_len) {
      if (!nd.truncate) {
        fail(c, "string of length " + std::to_string(len) + " is longer than max_length=" + std::to_string(nd.max_len) +
                    " of " + nd.label +
                    (nd.length_key.empty()
                         ? " (set text_truncate=True)"
                         : " (raise " + nd.length_key + " in the model config, or set text_truncate=True)"));
      }
      used = nd.max_len;
    }
    if (len < nd.min_len) {
      fail(c, "string of length " + std::to_string(len) + " is shorter than min_length=" + std::to_string(nd.min_len) +
                  " of " + nd.label);
    }
    const int kind = PyUnicode_KIND(obj);
    const void* data = PyUnicode_DATA(obj);
    const auto nchars = static_cast<std::int64_t>(nd.charset.chars.size());
    c.add_set(dst, static_cast<float>(used));
    for (std::int64_t i = 0; i < used; ++i) {
      const auto ch = static_cast<std::uint32_t>(PyUnicode_READ(kind, data, static_cast<Py_ssize_t>(i)));
      const std::int32_t id = nd.charset.id(ch);
      if (id < 0) {
        py::object one = py::reinterpret_steal<py::object>(PyUnicode_FromOrdinal(static_cast<int>(ch)));
        if (!one) throw py::error_already_set();
        fail(c, "character " + short_repr_chars(one.ptr()) + " at position " + std::to_string(i) +
                    " is not in the charset of " + nd.label + " (allowed: " + short_repr_chars(nd.charset.text.ptr()) +
                    ")");
      }
      if (nd.one_hot) c.add_set(dst + 1 + i * nchars + id, 1.0f);
      else if (id != 0) c.add_set(dst + 1 + i, static_cast<float>(id));
    }
  }

  // ------------------------------------------------ one of several spaces

  void walk_oneof(const Node& nd, PyObject* obj, std::int64_t dst, Collector& c) const {
    const auto k = static_cast<std::int64_t>(nd.children.size());
    const bool pair = PyTuple_Check(obj) || PyList_Check(obj);
    if (!pair || PySequence_Fast_GET_SIZE(obj) != 2) {
      fail(c, "expected (branch index, value) for " + nd.label + ", got " +
                  (pair ? "a " + std::string(Py_TYPE(obj)->tp_name) + " of " +
                              std::to_string(PySequence_Fast_GET_SIZE(obj)) + " items"
                        : std::string(Py_TYPE(obj)->tp_name)));
    }
    const std::size_t first = c.hold_items(obj);
    PyObject* index = c.held(first);
    std::int64_t branch = fast_index_offset(index, 0, k);
    if (branch < 0) {
      const IndexValue iv = read_index_scalar(c, index, "the branch index of " + nd.label);
      const std::string allowed = "0.." + std::to_string(k - 1);
      if (!iv.whole()) {
        fail(c, "branch index " + index_value_string(iv) + " is not an integer; " + nd.label +
                    " allows branch indices " + allowed);
      }
      if (!iv.integral || iv.v < 0 || iv.v >= k) {
        fail(c, "branch index " + index_value_string(iv) + " is out of range for " + nd.label + " (allowed " + allowed +
                    ")");
      }
      branch = iv.v;
    }
    c.add_set(dst + branch, 1.0f);
    const auto b = static_cast<std::size_t>(branch);
    PathGuard g(c, nullptr, 1);
    walk(child(nd, b), c.held(first + 1), dst + nd.child_offsets[b], c);
  }

  void walk_multidiscrete(const Node& nd, PyObject* obj, std::int64_t dst, Collector& c) const {
    if ((PyList_Check(obj) || PyTuple_Check(obj)) && nd.shape.size() == 1 &&
        PySequence_Fast_GET_SIZE(obj) == nd.shape[0] && nd.shape[0] > 0) {  // a list of numbers: read in place
      const std::size_t first = c.hold_items(obj);
      for (std::size_t k = 0; k < nd.nvec.size(); ++k) {
        PyObject* item = c.held(first + k);
        std::int64_t off = fast_index_offset(item, nd.starts[k], nd.nvec[k]);
        if (off < 0) {
          PathGuard g(c, nullptr, static_cast<std::int64_t>(k));
          off = checked_index(c, read_index_scalar(c, item, nd.component), nd.starts[k], nd.nvec[k], nd.component);
        }
        c.add_set(dst + nd.block_offsets[k] + off, 1.0f);
      }
      return;
    }
    ArrayView a;
    if (!as_array(obj, a) || !a.numeric || !a.native) {
      py::object arr = convert_array(c, obj, false, ("integers of shape " + shape_of({}, nd.shape)).c_str());
      as_array(arr.ptr(), a);
      if (!a.numeric) fail(c, "expected integers for " + nd.label + ", got " + short_repr(obj));
    }
    if (!has_shape(a, {}, nd.shape)) {
      fail(c, "expected shape " + shape_of({}, nd.shape) + " for " + nd.label + ", got " + shape_of(a));
    }
    if (a.contiguous && nd.numel > 0) {  // one typed check, then a single one-hot op for the leaf
      if (first_bad_index(nd, a, 1, nd.numel) < 0) {
        c.hold(obj);
        c.add_copy(a.data, dst, checked_narrow<std::int32_t>(nd.numel, "flatten: one-hot components"), a.type,
                   ValueMap::OneHot, nd.blocks());
        return;
      }
    }
    for_each_element(a, [&](std::int64_t k, const char* p) {
      const IndexValue iv = read_index_elem(p, a.type);
      const auto ku = static_cast<std::size_t>(k);
      const std::int64_t lo = nd.starts[ku], n = nd.nvec[ku];
      const std::int64_t off = iv.integral ? index_offset(iv.v, lo, n) : -1;
      if (off < 0) {
        push_unraveled(c, k, a);
        checked_index(c, iv, lo, n, nd.component);
      }
      c.add_set(dst + nd.block_offsets[ku] + off, 1.0f);
    });
  }

  // The first bad index of a (batch, k) block of `a` (rows possibly strided) as r * k + j, or -1.
  static std::int64_t first_bad_index(const Node& nd, const ArrayView& a, std::int64_t batch, std::int64_t k) {
    const std::int64_t stride = a.nd > 0 ? a.strides[0] : 0;
    std::int64_t bad = -1;
    visit_elem_type(a.type, [&](auto tag) {
      bad = detail::first_bad_one_hot<decltype(tag)>(a.data, stride, batch, k, nd.blocks());
    });
    return bad;
  }

  // Checks a (batch, k) block of indices against nd's ranges; the first bad element is
  // reported with its full path.
  void validate_indices(const Node& nd, const ArrayView& a, std::int64_t batch, std::int64_t k, Collector& c) const {
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

  // Pushes the multi-index of flat element k of `a` onto the error path.
  static void push_unraveled(Collector& c, std::int64_t k, const ArrayView& a) {
    std::int64_t idx[64];
    for (std::size_t d = a.nd; d-- > 0;) {
      idx[d] = k % a.dims[d];
      k /= a.dims[d];
    }
    for (std::size_t d = 0; d < a.nd; ++d) c.push_path(nullptr, idx[d]);
  }

  // A Box leaf; with lead >= 0 the value is `lead` items stacked, shape (lead, *shape).
  // Only the first `used` items are copied (a truncated sequence) when used >= 0.
  void walk_box(const Node& nd, PyObject* obj, std::int64_t dst, Collector& c, std::int64_t lead = -1,
                std::int64_t used = -1) const {
    ArrayView a;
    if (!as_array(obj, a) || !a.contiguous) {
      py::object arr = convert_array(c, obj, true, ("numbers of shape " + shape_of({}, nd.shape)).c_str());
      as_array(arr.ptr(), a);
    } else {
      c.hold(obj);
    }
    const bool ok = lead < 0 ? has_shape(a, {}, nd.shape) : has_shape(a, {lead}, nd.shape);
    if (!ok) {
      fail(c, "expected shape " + (lead < 0 ? shape_of({}, nd.shape) : shape_of({lead}, nd.shape)) + " for " +
                  nd.label + ", got " + shape_of(a));
    }
    const std::int64_t items = used >= 0 ? used : lead < 0 ? 1 : lead;
    const std::int64_t numel = checked_mul(nd.numel, items, "flatten: Box leaf size");
    if (numel > 0) add_row_copies(c, a.data, a.type, dst, numel, nd.map);
  }

  // ------------------------------------------------ batched structure

  std::int64_t leading_dim(PyObject* obj, Collector& c) const {
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
  std::int64_t batch_size(const Node& nd, PyObject* obj, Collector& c) const {
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
      fail(c, "expected " + std::to_string(nd.children.size()) + " items for " + nd.label + ", got " +
                  std::to_string(len));
    }
    const std::size_t first = c.hold_items(obj);
    PathGuard g(c, nullptr, static_cast<std::int64_t>(i));
    return batch_size(child(nd, i), c.held(first + i), c);
  }

  void check_batch(Collector& c, std::int64_t got, std::int64_t batch) const {
    if (got != batch) {
      fail(c, "batch dimension " + std::to_string(got) + " differs from the batch size " + std::to_string(batch) +
                  " of the first leaf");
    }
  }

  void walk_batched(const Node& nd, PyObject* obj, std::int64_t col, std::int64_t batch, Collector& c) const {
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
               checked_add(checked_mul(r, size(), "transform_batch: row offset"), col, "transform_batch: row offset"),
               c);
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
          fail(c,
               "expected shape " + shape_of({batch}, shape) + " for a batch of " + nd.label + ", got " + shape_of(a));
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
          fail(c, "expected shape " + shape_of({batch}, nd.shape) + " for a batch of " + nd.label + ", got " +
                      shape_of(a));
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

  // A non-dict mapping: has keys() and is not a list, tuple or array (as the reference).
  static bool is_mapping(PyObject* obj) {
    ArrayView a;
    return !PyList_Check(obj) && !PyTuple_Check(obj) && !as_array(obj, a) && PyObject_HasAttrString(obj, "keys");
  }

  static std::string keys_string(const Node& nd) {
    std::string s = "[";
    for (std::size_t i = 0; i < nd.keys.size(); ++i) s += (i ? ", " : "") + short_repr(nd.keys[i].ptr());
    return s + "]";
  }

  static std::string extra_keys(const Node& nd, PyObject* obj) {
    std::string s;
    py::list keys = py::reinterpret_steal<py::list>(PyMapping_Keys(obj));
    if (!keys) {
      PyErr_Clear();
      return "?";
    }
    for (py::handle k : keys) {
      bool known = false;
      for (const auto& key : nd.keys) {
        const int eq = PyObject_RichCompareBool(k.ptr(), key.ptr(), Py_EQ);
        if (eq < 0) PyErr_Clear();
        if (eq > 0) known = true;
      }
      if (!known) s += (s.empty() ? "" : ", ") + short_repr(k.ptr());
    }
    return "[" + s + "]";
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
