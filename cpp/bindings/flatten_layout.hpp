// The layout plan of the flattening binding: a space compiled (by rlblocks.preprocessors)
// into a tree of nodes, each with its flat size and offsets, parsed from Python once and
// checked (sizes and offsets consistent, none overflowing int64). flatten.cpp walks
// observations along it.
#pragma once
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>
#include <unordered_map>
#include <vector>

#include "rlblocks/checked.hpp"
#include "rlblocks/flatten.hpp"

namespace rlblocks::bindings::flatten_layout {

namespace py = pybind11;

// Callback: a leaf whose values come from Python (e.g. an image preprocessor nested in a
// Dict); it is called while walking, with the GIL held, and its float32 result copied.
// A gymnasium Sequence is a Repeated with `sequence` set (its own messages, truncation and
// stacked items). Graph: [n_nodes, n_edges, nodes, edges, links]; Text: [length, one-hot or
// ids per position]; OneOf: [branch one-hot, each branch's block].
enum class Kind { Dict, Tuple, Repeated, Discrete, MultiDiscrete, Box, Callback, Graph, Text, OneOf };

// A text leaf's charset: ids of code points, with a direct table for ASCII.
struct Charset {
  std::vector<std::uint32_t> chars;  // id -> code point
  std::int32_t ascii[128];           // code point -> id, or -1
  std::unordered_map<std::uint32_t, std::int32_t> other;
  py::object text;  // the charset as a str (for messages)

  Charset() { std::fill(std::begin(ascii), std::end(ascii), -1); }
  // The id of code point `ch`, or -1 when it is not in the charset.
  std::int32_t id(std::uint32_t ch) const {
    if (ch < 128) return ascii[ch];
    const auto it = other.find(ch);
    return it == other.end() ? -1 : it->second;
  }
};

struct Node {
  Kind kind = Kind::Box;
  std::int64_t size = 0;  // flat size of this node
  std::string label;      // repr of the space, for messages
  std::string component;  // what an index names in messages: the label (+ " component")
  // Dict / Tuple / Repeated
  std::vector<py::object> keys;
  std::vector<int> children;
  std::vector<std::int64_t> child_offsets;
  std::int64_t max_len = 0;
  // Sequence (a Repeated with `sequence` set)
  bool sequence = false, truncate = false, stack = false;
  // Graph: counts and where each part starts (relative to the node)
  std::int64_t max_nodes = 0, max_edges = 0, node_size = 0, edge_size = 0;
  std::int64_t nodes_offset = 0, edges_offset = 0, links_offset = 0;
  // Text (max_len above; `truncate` too)
  std::int64_t min_len = 0;
  bool one_hot = true;
  std::string length_key;
  Charset charset;
  // Discrete
  std::int64_t n = 0, start = 0;
  // MultiDiscrete / Box
  std::vector<std::int64_t> shape;
  std::int64_t numel = 0;
  std::vector<std::int64_t> nvec, starts, block_offsets;
  ValueMap map = ValueMap::Identity;
  // Callback: fn(obs) -> float32 array of `size` elements; batch_fn(obs) -> (B, size).
  py::object fn, batch_fn;
  bool has_leaf = false;  // whether any value lives below (an empty Dict/Tuple has none)

  OneHotBlocks blocks() const { return {block_offsets.data(), starts.data(), nvec.data()}; }
};

// The nodes of one space's layout (node `root` is the space itself).
class Layout {
 public:
  Layout(const py::list& nodes, int root) : root_(root) {
    for (py::handle h : nodes) nodes_.push_back(parse_node(py::reinterpret_borrow<py::dict>(h)));
    if (root < 0 || root >= static_cast<int>(nodes_.size())) throw py::value_error("FlattenPlan: bad root");
    for (Node& nd : nodes_) {
      std::int64_t off = nd.kind == Kind::OneOf ? static_cast<std::int64_t>(nd.children.size()) : 0;
      for (int ch : nd.children) {
        if (ch < 0 || ch >= static_cast<int>(nodes_.size())) throw py::value_error("FlattenPlan: bad child");
        if (nd.kind == Kind::Graph) continue;  // checked below
        if (nd.kind == Kind::Repeated) {
          const std::int64_t items = checked_mul(nd.max_len, nodes_[static_cast<std::size_t>(ch)].size,
                                                 "FlattenPlan: Repeated max_len * item size");
          if (nd.size != checked_add(1, items, "FlattenPlan: Repeated size")) {
            throw py::value_error("FlattenPlan: inconsistent Repeated size");
          }
        } else {
          nd.child_offsets.push_back(off);
          off = checked_add(off, nodes_[static_cast<std::size_t>(ch)].size, "FlattenPlan: flat offset");
        }
      }
      if ((nd.kind == Kind::Dict || nd.kind == Kind::Tuple || nd.kind == Kind::OneOf) && off != nd.size) {
        throw py::value_error("FlattenPlan: inconsistent sizes for " + nd.label);
      }
      if (nd.kind == Kind::Graph) check_graph(nd);
      if (nd.kind != Kind::Box && nd.kind != Kind::Callback) zero_fill_ = true;
      for (std::size_t j = 0; j < nd.starts.size(); ++j) {
        if (nd.starts[j] > INT64_MAX - (nd.nvec[j] - 1))
          throw py::value_error("FlattenPlan: start + n - 1 overflows int64");
      }
    }
    for (Node& nd : nodes_) nd.has_leaf = node_has_leaf(nd);
  }

  std::int64_t size() const { return root().size; }
  // Whether the output must be zero-filled first (anything but Box/Callback leaves writes
  // only some of its values).
  bool zero_fill() const { return zero_fill_; }
  const Node& root() const { return nodes_[static_cast<std::size_t>(root_)]; }
  const Node& child(const Node& nd, std::size_t i) const { return nodes_[static_cast<std::size_t>(nd.children[i])]; }

 private:
  // A Graph's parts: their sizes match the children and add up to the node's size.
  void check_graph(Node& nd) const {
    const auto child_size = [&](std::size_t i) { return nodes_[static_cast<std::size_t>(nd.children[i])].size; };
    if (child_size(0) != nd.node_size || (nd.children.size() == 2 ? child_size(1) : 0) != nd.edge_size) {
      throw py::value_error("FlattenPlan: Graph item sizes differ from its children");
    }
    nd.nodes_offset = 2;
    nd.edges_offset =
        checked_add(2, checked_mul(nd.max_nodes, nd.node_size, "FlattenPlan: Graph nodes"), "FlattenPlan: Graph size");
    nd.links_offset = checked_add(nd.edges_offset, checked_mul(nd.max_edges, nd.edge_size, "FlattenPlan: Graph edges"),
                                  "FlattenPlan: Graph size");
    const std::int64_t end = checked_add(nd.links_offset, checked_mul(nd.max_edges, 2, "FlattenPlan: Graph links"),
                                         "FlattenPlan: Graph size");
    if (end != nd.size) throw py::value_error("FlattenPlan: inconsistent Graph size");
  }

  bool node_has_leaf(const Node& nd) const {
    if (nd.kind != Kind::Dict && nd.kind != Kind::Tuple) return true;
    for (std::size_t i = 0; i < nd.children.size(); ++i) {
      if (node_has_leaf(child(nd, i))) return true;
    }
    return false;
  }

  // A node's str field as UTF-8; a ValueError naming the field for a non-str or a str that
  // cannot be encoded (a lone surrogate), never pybind11's cast error.
  static std::string utf8_field(const py::dict& d, const char* key) {
    const py::object v = d[key];
    Py_ssize_t n = 0;
    const char* s = PyUnicode_Check(v.ptr()) ? PyUnicode_AsUTF8AndSize(v.ptr(), &n) : nullptr;
    if (s == nullptr) {
      PyErr_Clear();
      throw py::value_error(std::string("FlattenPlan: node field '") + key +
                            "' must be a str encodable as UTF-8, got " +
                            py::str(py::module_::import("builtins").attr("ascii")(v)).cast<std::string>());
    }
    return std::string(s, static_cast<std::size_t>(n));
  }

  static Node parse_node(const py::dict& d) {
    Node nd;
    const std::string kind = utf8_field(d, "kind");
    nd.size = d["size"].cast<std::int64_t>();
    nd.label = utf8_field(d, "label");
    if (d.contains("children")) nd.children = d["children"].cast<std::vector<int>>();
    if (kind == "dict") {
      nd.kind = Kind::Dict;
      for (py::handle k : d["keys"]) nd.keys.push_back(py::reinterpret_borrow<py::object>(k));
      if (nd.keys.size() != nd.children.size()) throw py::value_error("FlattenPlan: keys/children mismatch");
    } else if (kind == "tuple") {
      nd.kind = Kind::Tuple;
    } else if (kind == "repeated" || kind == "sequence") {
      nd.kind = Kind::Repeated;
      nd.max_len = d["max_len"].cast<std::int64_t>();
      if (nd.max_len < 0) throw py::value_error("FlattenPlan: negative max_len");
      if (nd.children.size() != 1) throw py::value_error("FlattenPlan: Repeated needs one child");
      if (kind == "sequence") {
        nd.sequence = true;
        nd.truncate = d["truncate"].cast<bool>();
        nd.stack = d["stack"].cast<bool>();
      }
    } else if (kind == "graph") {
      nd.kind = Kind::Graph;
      nd.max_nodes = d["max_nodes"].cast<std::int64_t>();
      nd.max_edges = d["max_edges"].cast<std::int64_t>();
      nd.node_size = d["node_size"].cast<std::int64_t>();
      nd.edge_size = d["edge_size"].cast<std::int64_t>();
      if (nd.max_nodes < 0 || nd.max_edges < 0 || nd.node_size < 0 || nd.edge_size < 0) {
        throw py::value_error("FlattenPlan: negative Graph size");
      }
      if (nd.children.size() != 1 && nd.children.size() != 2) {
        throw py::value_error("FlattenPlan: Graph needs one or two children");
      }
    } else if (kind == "text") {
      parse_text(d, nd);
    } else if (kind == "oneof") {
      nd.kind = Kind::OneOf;
      if (nd.children.empty()) throw py::value_error("FlattenPlan: OneOf needs a branch");
    } else if (kind == "discrete") {
      nd.kind = Kind::Discrete;
      nd.n = d["n"].cast<std::int64_t>();
      nd.start = d["start"].cast<std::int64_t>();
      if (nd.n != nd.size || nd.n < 1) throw py::value_error("FlattenPlan: bad Discrete");
      nd.nvec = {nd.n};  // a Discrete is a one-component MultiDiscrete for batched one-hots
      nd.component = nd.label;
      nd.starts = {nd.start};
      nd.block_offsets = {0};
      nd.numel = 1;
    } else if (kind == "multidiscrete") {
      nd.kind = Kind::MultiDiscrete;
      nd.shape = d["shape"].cast<std::vector<std::int64_t>>();
      nd.nvec = d["nvec"].cast<std::vector<std::int64_t>>();
      nd.starts = d["starts"].cast<std::vector<std::int64_t>>();
      nd.numel = static_cast<std::int64_t>(nd.nvec.size());
      nd.component = nd.label + " component";
      std::int64_t off = 0;
      for (auto v : nd.nvec) {
        if (v < 1) throw py::value_error("FlattenPlan: bad MultiDiscrete nvec");
        nd.block_offsets.push_back(off);
        off = checked_add(off, v, "FlattenPlan: MultiDiscrete one-hot size");
      }
      if (off != nd.size || nd.starts.size() != nd.nvec.size()) throw py::value_error("FlattenPlan: bad MultiDiscrete");
    } else if (kind == "box") {
      nd.kind = Kind::Box;
      nd.shape = d["shape"].cast<std::vector<std::int64_t>>();
      for (auto v : nd.shape) {
        if (v < 0) throw py::value_error("FlattenPlan: negative Box dimension");
      }
      nd.numel = checked_product(nd.shape, "FlattenPlan: Box size");
      if (nd.numel != nd.size) throw py::value_error("FlattenPlan: bad Box size");
      nd.map = utf8_field(d, "map") == "atari_ram" ? ValueMap::AtariRam : ValueMap::Identity;
    } else if (kind == "callback") {
      nd.kind = Kind::Callback;
      nd.fn = d["fn"];
      nd.batch_fn = d["batch_fn"];
    } else {
      throw py::value_error("FlattenPlan: unknown node kind " + kind);
    }
    return nd;
  }

  static void parse_text(const py::dict& d, Node& nd) {
    nd.kind = Kind::Text;
    nd.max_len = d["max_len"].cast<std::int64_t>();
    nd.min_len = d["min_len"].cast<std::int64_t>();
    nd.truncate = d["truncate"].cast<bool>();
    nd.length_key = utf8_field(d, "length_key");
    const std::string encoding = utf8_field(d, "encoding");
    if (encoding != "one_hot" && encoding != "ids")
      throw py::value_error("FlattenPlan: unknown text encoding " + encoding);
    nd.one_hot = encoding == "one_hot";
    py::object text = d["charset"];
    if (!PyUnicode_Check(text.ptr())) throw py::value_error("FlattenPlan: the charset must be a str");
    nd.charset.text = text;
    const Py_ssize_t n = PyUnicode_GET_LENGTH(text.ptr());
    if (n == 0) throw py::value_error("FlattenPlan: empty charset");
    if (n > INT32_MAX) throw py::value_error("FlattenPlan: charset too large");
    const int kind = PyUnicode_KIND(text.ptr());
    const void* data = PyUnicode_DATA(text.ptr());
    for (Py_ssize_t i = 0; i < n; ++i) {
      const auto ch = static_cast<std::uint32_t>(PyUnicode_READ(kind, data, i));
      const auto id = static_cast<std::int32_t>(i);
      if (nd.charset.id(ch) >= 0) throw py::value_error("FlattenPlan: repeated character in the charset");
      if (ch < 128) nd.charset.ascii[ch] = id;
      else nd.charset.other.emplace(ch, id);
      nd.charset.chars.push_back(ch);
    }
    if (nd.max_len < 0 || nd.min_len < 0 || nd.min_len > nd.max_len) {
      throw py::value_error("FlattenPlan: bad text lengths");
    }
    const std::int64_t per_position = nd.one_hot ? static_cast<std::int64_t>(n) : 1;
    const std::int64_t size =
        checked_add(1, checked_mul(nd.max_len, per_position, "FlattenPlan: text size"), "FlattenPlan: text size");
    if (size != nd.size) throw py::value_error("FlattenPlan: inconsistent text size");
  }

  std::vector<Node> nodes_;
  int root_;
  bool zero_fill_ = false;
};

}  // namespace rlblocks::bindings::flatten_layout
