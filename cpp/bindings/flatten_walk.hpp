// The walk of one observation along a layout plan (flatten_layout.hpp), with the GIL held:
// every value is read and validated with the readers of flatten_read.hpp and turned into
// plain ops on a Collector; nothing is written yet. The walker's core kinds (Dict, Tuple,
// Repeated, Discrete, MultiDiscrete, Box, callbacks) are here; the newer kinds (stacked
// sequences, Graph, Text, OneOf) are defined in flatten_kinds.hpp and the walk of a batched
// structure in flatten_batched.hpp. flatten.cpp's FlattenPlan drives it.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "flatten_layout.hpp"
#include "flatten_read.hpp"
#include "rlblocks/checked.hpp"
#include "rlblocks/flatten.hpp"

namespace rlblocks::bindings::flatten_walk {

namespace py = pybind11;
using namespace flatten_read;    // NOLINT: the readers are the walk's vocabulary
using namespace flatten_layout;  // NOLINT: and the layout's nodes

class Walker : public Layout {
 public:
  using Layout::Layout;

 protected:
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

  // ------------------------------------------------ new kinds (flatten_kinds.hpp)

  static bool is_stacked(const Node& ch, PyObject* obj);
  std::int64_t stacked_leaf_length(PyObject* obj, Collector& c) const;
  std::int64_t stacked_length(const Node& ch, PyObject* obj, Collector& c) const;
  std::vector<py::object> stacked_dict_values(const Node& ch, PyObject* obj, Collector& c) const;
  void check_stacked_tuple(const Node& ch, PyObject* obj, Collector& c) const;
  py::list split_stacked(const Node& ch, PyObject* obj, std::int64_t len, std::int64_t used, Collector& c) const;
  void walk_stacked(const Node& nd, PyObject* obj, std::int64_t dst, Collector& c) const;
  std::int64_t graph_count(const Node& nd, PyObject* obj, const char* attr, Collector& c) const;
  void walk_graph_items(const Node& item, PyObject* obj, std::int64_t count, std::int64_t dst, const char* attr,
                        Collector& c) const;
  void walk_graph(const Node& nd, PyObject* obj, std::int64_t dst, Collector& c) const;
  void walk_links(const Node& nd, PyObject* links, std::int64_t n_nodes, std::int64_t n_edges, std::int64_t dst,
                  Collector& c) const;
  void walk_text(const Node& nd, PyObject* obj, std::int64_t dst, Collector& c) const;
  void walk_oneof(const Node& nd, PyObject* obj, std::int64_t dst, Collector& c) const;

  // ------------------------------------------------ batched structure (flatten_batched.hpp)

  std::int64_t leading_dim(PyObject* obj, Collector& c) const;
  std::int64_t batch_size(const Node& nd, PyObject* obj, Collector& c) const;
  void check_batch(Collector& c, std::int64_t got, std::int64_t batch) const;
  void walk_batched(const Node& nd, PyObject* obj, std::int64_t col, std::int64_t batch, Collector& c) const;
  void validate_indices(const Node& nd, const ArrayView& a, std::int64_t batch, std::int64_t k, Collector& c) const;
};

}  // namespace rlblocks::bindings::flatten_walk
