// The walk of the newer space kinds (see flatten_walk.hpp): gymnasium Sequences given in
// stacked form, Graphs (counts, links, nodes, edges), Text and OneOf. Each checks its whole
// value before it adds an op, with the numpy twin's messages (_reference/flatten_kinds.py).
#pragma once
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "flatten_walk.hpp"

namespace rlblocks::bindings::flatten_walk {

// ------------------------------------------------ stacked sequences

// Whether `obj` is the stacked form of a Sequence(stack=True) of Dicts / Tuples: a
// mapping (Dict items) or a tuple (Tuple items) of arrays with a leading length dim.
inline bool Walker::is_stacked(const Node& ch, PyObject* obj) {
  if (ch.kind == Kind::Dict) return PyDict_Check(obj) || is_mapping(obj);
  return ch.kind == Kind::Tuple && PyTuple_Check(obj);
}

// The length of a stacked value (leading dim of a leaf's stacked values).
inline std::int64_t Walker::stacked_leaf_length(PyObject* obj, Collector& c) const {
  ArrayView a;
  if (as_array(obj, a)) {
    if (a.nd == 0) fail(c, "expected stacked values with a leading length dimension, got a 0-d array");
    return a.dims[0];
  }
  if (PyList_Check(obj) || PyTuple_Check(obj)) return PySequence_Fast_GET_SIZE(obj);
  fail(c, std::string("expected stacked values with a leading length dimension, got ") + Py_TYPE(obj)->tp_name);
}

// The item count of a stacked Dict / Tuple value: its first leaf's leading dim.
inline std::int64_t Walker::stacked_length(const Node& ch, PyObject* obj, Collector& c) const {
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
inline std::vector<py::object> Walker::stacked_dict_values(const Node& ch, PyObject* obj, Collector& c) const {
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

inline void Walker::check_stacked_tuple(const Node& ch, PyObject* obj, Collector& c) const {
  if (!PyTuple_Check(obj) && !PyList_Check(obj)) {
    fail(c, "expected a tuple of " + std::to_string(ch.children.size()) + " stacked values for " + ch.label + ", got " +
                Py_TYPE(obj)->tp_name);
  }
  if (static_cast<std::size_t>(PySequence_Fast_GET_SIZE(obj)) != ch.children.size()) {
    fail(c, "expected " + std::to_string(ch.children.size()) + " stacked values for " + ch.label + ", got " +
                std::to_string(PySequence_Fast_GET_SIZE(obj)));
  }
}

// The first `used` items of a stacked value of `len` items (every leaf indexed), as a list.
inline py::list Walker::split_stacked(const Node& ch, PyObject* obj, std::int64_t len, std::int64_t used,
                                      Collector& c) const {
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

inline void Walker::walk_stacked(const Node& nd, PyObject* obj, std::int64_t dst, Collector& c) const {
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
inline std::int64_t Walker::graph_count(const Node& nd, PyObject* obj, const char* attr, Collector& c) const {
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
inline void Walker::walk_graph_items(const Node& item, PyObject* obj, std::int64_t count, std::int64_t dst,
                                     const char* attr, Collector& c) const {
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

inline void Walker::walk_graph(const Node& nd, PyObject* obj, std::int64_t dst, Collector& c) const {
  py::object parts[3];
  if (PyTuple_Check(obj) || PyList_Check(obj)) {  // GraphInstance is a NamedTuple
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
    if (n != 3) {
      fail(c, "expected a GraphInstance(nodes, edges, edge_links) for " + nd.label + ", got a " +
                  Py_TYPE(obj)->tp_name + " of " + std::to_string(n) + " items");
    }
    for (Py_ssize_t i = 0; i < 3; ++i) parts[i] = py::reinterpret_borrow<py::object>(PySequence_Fast_GET_ITEM(obj, i));
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
    fail(c,
         "graph has " + std::to_string(n_nodes) + " nodes, more than graph_max_nodes=" + std::to_string(nd.max_nodes));
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
    fail(c,
         "graph has " + std::to_string(n_edges) + " edges, more than graph_max_edges=" + std::to_string(nd.max_edges));
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
inline void Walker::walk_links(const Node& nd, PyObject* links, std::int64_t n_nodes, std::int64_t n_edges,
                               std::int64_t dst, Collector& c) const {
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
    fail(c,
         "expected shape " + shape_of({n_edges}, pair) + " for the edge links of " + nd.label + ", got " + shape_of(a));
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

inline void Walker::walk_text(const Node& nd, PyObject* obj, std::int64_t dst, Collector& c) const {
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

inline void Walker::walk_oneof(const Node& nd, PyObject* obj, std::int64_t dst, Collector& c) const {
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
      fail(c, "branch index " + index_value_string(iv) + " is not an integer; " + nd.label + " allows branch indices " +
                  allowed);
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

}  // namespace rlblocks::bindings::flatten_walk
