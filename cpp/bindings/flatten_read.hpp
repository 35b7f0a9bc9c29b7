// The Python-object side of the flattening binding: reading observations (GIL held).
//
// A Collector gathers what one call reads (the ops for the kernel, references that keep
// their arrays alive, where the walk is for error messages); ArrayView reads numpy arrays'
// headers in place; the index readers turn Python and numpy integers, floats and arrays
// into exact int64 indices or a ValueError naming the path (`obs["a"][2]`), the value and
// the allowed range. flatten.cpp walks a layout plan with them.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "rlblocks/checked.hpp"
#include "rlblocks/flatten.hpp"

namespace rlblocks::bindings::flatten_read {

struct PathElem {
  PyObject* key;  // borrowed; nullptr for an index
  std::int64_t index;
  const char* attr = nullptr;  // an attribute (`.nodes` of a graph) instead of key / index
};

// Everything one call collects before executing. Reused per thread (capacity kept).
struct Collector {
  // Row ops. Walking a list visits rows in order, so row r's ops start where the
  // *_row_start arrays say. A batched structure can revisit rows (one pass per Repeated
  // leaf): then every op is tagged with its row and bucketed before execution.
  std::vector<RowCopy> copies;
  std::vector<RowSet> sets;
  bool tag_rows = false;
  std::vector<std::int64_t> copy_rows, set_rows;
  std::vector<ColumnCopy> column_copies;
  std::vector<ColumnOneHot> column_one_hots;
  std::vector<py::object> keepalive;  // converted arrays / fetched items used by the ops
  // Where the walk is in the observation (for error messages): a fixed stack, no allocation.
  static constexpr int kMaxDepth = 256;
  PathElem path[kMaxDepth];
  int depth = 0;
  std::int64_t row = 0;
  // Execution scratch.
  std::vector<RowCopy> sorted_copies;
  std::vector<RowSet> sorted_sets;
  std::vector<std::int64_t> copy_row_start, set_row_start;

  void clear() {
    copies.clear();
    copy_rows.clear();
    sets.clear();
    set_rows.clear();
    column_copies.clear();
    column_one_hots.clear();
    keepalive.clear();
    depth = 0;
    row = 0;
    tag_rows = false;
    copy_row_start.clear();
    set_row_start.clear();
  }
  // The ops are written field by field in place: building one on the stack and copying it
  // makes the compiler reload the fields it just stored, one store-forwarding stall per op.
  void add_copy(const void* src, std::int64_t dst, std::int32_t n, ElemType type, ValueMap map,
                const OneHotBlocks& blocks = {}) {
    RowCopy& op = copies.emplace_back();
    op.src = src;
    op.dst = dst;
    op.n = n;
    op.type = type;
    op.map = map;
    op.blocks = blocks;
    if (tag_rows) copy_rows.push_back(row);
  }
  void add_set(std::int64_t dst, float value) {
    RowSet& op = sets.emplace_back();
    op.dst = dst;
    op.value = value;
    if (tag_rows) set_rows.push_back(row);
  }
  void push_path(PyObject* key, std::int64_t index, const char* attr = nullptr) {
    if (depth == kMaxDepth) throw py::value_error("observation is nested deeper than 256 levels");
    path[depth++] = PathElem{key, index, attr};
  }
  void begin_row() {  // list walks: row boundaries
    copy_row_start.push_back(static_cast<std::int64_t>(copies.size()));
    set_row_start.push_back(static_cast<std::int64_t>(sets.size()));
  }
  // Keeps `obj` alive until the call returns (an array whose memory an op reads).
  void hold(PyObject* obj) { keepalive.push_back(py::reinterpret_borrow<py::object>(obj)); }
  // Holds the items of a list or tuple `seq` (the walk's snapshot: code run while walking
  // them cannot free them) and returns where they start in `keepalive`; item i is then
  // keepalive[first + i] (an index, not a pointer: walking an item may grow the vector).
  std::size_t hold_items(PyObject* seq) {
    const std::size_t first = keepalive.size();
    const Py_ssize_t len = PySequence_Fast_GET_SIZE(seq);
    PyObject** items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < len; ++i) keepalive.push_back(py::reinterpret_borrow<py::object>(items[i]));
    return first;
  }
  PyObject* held(std::size_t i) const { return keepalive[i].ptr(); }

  // A call over a huge batch must not leave its peak allocation behind in every thread
  // that made one: buffers above kKeepBytes are released after the call.
  void release_large_buffers() {
    release_if_large(copies);
    release_if_large(copy_rows);
    release_if_large(sets);
    release_if_large(set_rows);
    release_if_large(column_copies);
    release_if_large(column_one_hots);
    release_if_large(keepalive);
    release_if_large(sorted_copies);
    release_if_large(sorted_sets);
    release_if_large(copy_row_start);
    release_if_large(set_row_start);
  }
  std::size_t capacity_bytes() const {
    return bytes(copies) + bytes(copy_rows) + bytes(sets) + bytes(set_rows) + bytes(column_copies) +
           bytes(column_one_hots) + bytes(keepalive) + bytes(sorted_copies) + bytes(sorted_sets) +
           bytes(copy_row_start) + bytes(set_row_start);
  }
  static constexpr std::size_t kKeepBytes = std::size_t{1} << 20;
  template <class T>
  static void release_if_large(std::vector<T>& v) {
    if (v.capacity() * sizeof(T) > kKeepBytes) std::vector<T>().swap(v);
  }
  template <class T>
  static std::size_t bytes(const std::vector<T>& v) {
    return v.capacity() * sizeof(T);
  }
};

// The calling thread's cached collector.
inline Collector& thread_collector() {
  thread_local Collector cached;
  return cached;
}

// A per-thread collector; a re-entrant call (an observation's __getitem__ calling back
// into rlblocks) gets a fresh one.
class CollectorLease {
 public:
  CollectorLease() {
    thread_local bool busy = false;
    if (!busy) {
      busy_flag_ = &busy;
      busy = true;
      c_ = &thread_collector();
    } else {
      own_ = std::make_unique<Collector>();
      c_ = own_.get();
    }
    c_->clear();
  }
  ~CollectorLease() {
    c_->keepalive.clear();  // GIL is held here
    c_->release_large_buffers();
    if (busy_flag_) *busy_flag_ = false;
  }
  Collector& operator*() { return *c_; }

 private:
  Collector* c_ = nullptr;
  std::unique_ptr<Collector> own_;
  bool* busy_flag_ = nullptr;
};

// ---------------------------------------------------------------- messages

inline std::string short_repr(PyObject* obj) {
  PyObject* r = PyObject_Repr(obj);
  if (!r) {
    PyErr_Clear();
    return std::string("<") + Py_TYPE(obj)->tp_name + ">";
  }
  Py_ssize_t len = 0;
  const char* s = PyUnicode_AsUTF8AndSize(r, &len);
  std::string out = s ? std::string(s, static_cast<std::size_t>(len)) : std::string("?");
  Py_DECREF(r);
  if (out.size() > 80) out = out.substr(0, 77) + "...";
  return out;
}

// repr(obj) cut to `limit` code points (77 and "..." when longer), as the numpy twin does.
inline std::string short_repr_chars(PyObject* obj, Py_ssize_t limit = 80) {
  py::object r = py::reinterpret_steal<py::object>(PyObject_Repr(obj));
  if (!r) throw py::error_already_set();
  if (PyUnicode_GET_LENGTH(r.ptr()) > limit) {
    py::object head = py::reinterpret_steal<py::object>(PyUnicode_Substring(r.ptr(), 0, limit - 3));
    if (!head) throw py::error_already_set();
    r = head;
    const char* s = PyUnicode_AsUTF8(r.ptr());
    if (!s) throw py::error_already_set();
    return std::string(s) + "...";
  }
  const char* s = PyUnicode_AsUTF8(r.ptr());
  if (!s) throw py::error_already_set();
  return s;
}

inline std::string path_string(const Collector& c) {
  std::string s = "obs";
  for (int i = 0; i < c.depth; ++i) {
    const PathElem& e = c.path[i];
    if (e.attr != nullptr) {
      s += std::string(".") + e.attr;
    } else if (e.key == nullptr) {
      s += "[" + std::to_string(e.index) + "]";
    } else if (PyUnicode_Check(e.key)) {
      const char* k = PyUnicode_AsUTF8(e.key);
      s += std::string("[\"") + (k ? k : "?") + "\"]";
    } else {
      s += "[" + short_repr(e.key) + "]";
    }
  }
  return s;
}

[[noreturn]] inline void fail(const Collector& c, const std::string& what) {
  throw py::value_error(path_string(c) + ": " + what);
}

struct PathGuard {
  PathGuard(Collector& c, PyObject* key, std::int64_t index) : c_(c) { c_.push_path(key, index); }
  PathGuard(Collector& c, const char* attr) : c_(c) { c_.push_path(nullptr, 0, attr); }
  ~PathGuard() { --c_.depth; }
  Collector& c_;
};

// ---------------------------------------------------------------- arrays

// A borrowed view of an ndarray's header (valid while the array lives).
struct ArrayView {
  char* data = nullptr;
  std::size_t nd = 0;
  const Py_ssize_t* dims = nullptr;
  const Py_ssize_t* strides = nullptr;
  ElemType type = ElemType::F32;
  bool numeric = false;     // a type the kernel reads directly
  bool native = false;      // native byte order (values can be read in place)
  bool contiguous = false;  // C-contiguous, aligned, native byte order
  bool c_order = false;     // C-contiguous (elements in row-major order, back to back)
  std::int64_t numel = 1;
};

inline bool as_array(PyObject* obj, ArrayView& a) {
  if (!py::detail::npy_api::get().PyArray_Check_(obj)) return false;
  auto* proxy = py::detail::array_proxy(obj);
  auto* descr = py::detail::array_descriptor_proxy(proxy->descr);
  static const bool numpy2 = py::detail::npy_api::get().PyArray_RUNTIME_VERSION_ >= 0x12;
  const auto itemsize = numpy2 ? py::detail::array_descriptor2_proxy(proxy->descr)->elsize
                               : py::detail::array_descriptor1_proxy(proxy->descr)->elsize;
  a.data = proxy->data;
  a.nd = static_cast<std::size_t>(proxy->nd);
  a.dims = proxy->dimensions;
  a.strides = proxy->strides;
  a.numel = a.nd == 0 ? 1 : a.nd == 1 ? a.dims[0] : checked_product(a.dims, a.nd, "array size");
  a.numeric = true;
  switch (descr->kind) {
    case 'f':
      if (itemsize == 4) a.type = ElemType::F32;
      else if (itemsize == 8) a.type = ElemType::F64;
      else a.numeric = false;
      break;
    case 'i':
    case 'u': {
      const bool u = descr->kind == 'u';
      if (itemsize == 1) a.type = u ? ElemType::U8 : ElemType::I8;
      else if (itemsize == 2) a.type = u ? ElemType::U16 : ElemType::I16;
      else if (itemsize == 4) a.type = u ? ElemType::U32 : ElemType::I32;
      else if (itemsize == 8) a.type = u ? ElemType::U64 : ElemType::I64;
      else a.numeric = false;
      break;
    }
    case 'b': a.type = ElemType::Bool; break;
    default: a.numeric = false;
  }
  const int flags = proxy->flags;
  a.native = descr->byteorder != '>' || itemsize == 1;
  a.c_order = (flags & py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_) != 0;
  a.contiguous = a.numeric && a.native && (flags & py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_) &&
                 (flags & py::detail::npy_api::NPY_ARRAY_ALIGNED_);
  return true;
}

// a.shape == (lead..., *shape) where `lead` holds the leading dims (if any).
inline bool has_shape(const ArrayView& a, std::initializer_list<std::int64_t> lead,
                      const std::vector<std::int64_t>& shape) {
  if (a.nd != lead.size() + shape.size()) return false;
  std::size_t i = 0;
  for (auto d : lead)
    if (a.dims[i++] != d) return false;
  for (auto d : shape)
    if (a.dims[i++] != d) return false;
  return true;
}

inline std::string shape_of(const ArrayView& a) { return shape_str(a.dims, a.nd); }

inline std::string shape_of(std::initializer_list<std::int64_t> lead, const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> all(lead);
  all.insert(all.end(), shape.begin(), shape.end());
  return shape_str(all.data(), all.size());
}

// Whether every dimension after the first is C-contiguous (rows may be strided).
inline bool rows_contiguous(const ArrayView& a) {
  if (!a.numeric || !a.native || a.nd == 0) return false;
  std::int64_t expect = elem_size(a.type);
  for (std::size_t i = a.nd; i-- > 1;) {
    if (a.dims[i] != 1 && a.strides[i] != expect) return false;
    expect *= a.dims[i];
  }
  return reinterpret_cast<std::uintptr_t>(a.data) % static_cast<std::uintptr_t>(elem_size(a.type)) == 0;
}

// Calls f(k, pointer) for every element of `a` in row-major order (k = flat index).
template <class F>
void for_each_element(const ArrayView& a, F&& f) {
  const std::int64_t es = elem_size(a.type);
  if (a.c_order) {
    for (std::int64_t k = 0; k < a.numel; ++k) f(k, a.data + k * es);
    return;
  }
  std::int64_t idx[64] = {0};  // numpy arrays have at most 64 dimensions
  for (std::int64_t k = 0; k < a.numel; ++k) {
    std::int64_t off = 0;
    for (std::size_t d = 0; d < a.nd; ++d) off += idx[d] * a.strides[d];
    f(k, a.data + off);
    for (std::size_t d = a.nd; d-- > 0;) {
      if (++idx[d] < a.dims[d]) break;
      idx[d] = 0;
    }
  }
}

// Converts anything array-like to a C-contiguous array of `Target` (float32 for copies);
// without `Target` numpy picks the dtype (used for indices, validated afterwards).
// Only real numbers are accepted (bool, integer, float dtypes): complex values are not
// truncated to their real part, strings are not parsed. Indices keep an integer dtype in
// native byte order; float16 and long double become float32 / float64.
inline py::object convert_array(Collector& c, PyObject* obj, bool to_float32, const char* expected) {
  py::array arr = py::array::ensure(py::handle(obj));
  if (!arr) {
    PyErr_Clear();
    fail(c, std::string("expected ") + expected + ", got " + short_repr(obj));
  }
  const char kind = arr.dtype().kind();
  if (kind != 'b' && kind != 'i' && kind != 'u' && kind != 'f') {
    fail(c, std::string("expected ") + expected + " (real numbers), got " + short_repr(obj) + " of dtype " +
                std::string(py::str(arr.dtype())));
  }
  const auto itemsize = arr.dtype().itemsize();
  py::object result;
  if (to_float32) {
    result = py::array_t < float, py::array::c_style | py::array::forcecast > ::ensure(arr);
  } else if (kind == 'f' && itemsize == 2) {
    result = py::array_t < float, py::array::c_style | py::array::forcecast > ::ensure(arr);
  } else if (kind == 'f' && itemsize > 8) {
    result = py::array_t < double, py::array::c_style | py::array::forcecast > ::ensure(arr);
  } else {
    result = py::array::ensure(arr, py::array::c_style);
    ArrayView a;
    if (result && as_array(result.ptr(), a) && !a.native) {  // byte-swapped: make it native
      result = result.attr("astype")(result.attr("dtype").attr("newbyteorder")("="));
    }
  }
  if (!result) throw py::error_already_set();
  c.keepalive.push_back(result);
  return result;
}

// ---------------------------------------------------------------- indices

struct IndexValue {
  bool integral;
  std::int64_t v;
  double raw;
  std::uint64_t big = 0;  // a uint64 above int64 (raw rounds it), else 0
  // A whole number (beyond int64 when not integral): out of range, not "not an integer".
  bool whole() const { return integral || big != 0 || (std::isfinite(raw) && raw == std::floor(raw)); }
};

inline IndexValue read_index_elem(const char* p, ElemType t) {
  IndexValue iv{false, 0, 0};
  visit_elem_type(t, [&](auto tag) {
    using T = decltype(tag);
    T v;
    std::memcpy(&v, p, sizeof(T));
    if constexpr (std::is_floating_point_v<T>) {
      const double d = static_cast<double>(v);
      // |d| < 2**63, so the integer fits int64 (2**63 is exact in double)
      const bool ok =
          std::isfinite(d) && d == std::floor(d) && d >= -9223372036854775808.0 && d < 9223372036854775808.0;
      iv = IndexValue{ok, ok ? static_cast<std::int64_t>(d) : 0, d};
    } else if constexpr (std::is_same_v<T, std::uint64_t>) {
      const bool ok = v <= static_cast<std::uint64_t>(INT64_MAX);
      iv = IndexValue{ok, ok ? static_cast<std::int64_t>(v) : 0, static_cast<double>(v), ok ? 0 : v};
    } else {
      iv = IndexValue{true, static_cast<std::int64_t>(v), 0};
    }
  });
  return iv;
}

inline std::string index_value_string(const IndexValue& iv) {
  if (iv.integral) return std::to_string(iv.v);
  if (iv.big != 0) return std::to_string(iv.big);
  std::ostringstream os;
  os << iv.raw;
  return os.str();
}

// Validates one index against [start, start + n) and returns it (minus start).
// (The layout guarantees start + n - 1 fits in int64.)
inline std::int64_t checked_index(const Collector& c, const IndexValue& iv, std::int64_t start, std::int64_t n,
                                  const std::string& label) {
  const std::int64_t off = iv.integral ? index_offset(iv.v, start, n) : -1;
  if (off >= 0) return off;
  const std::string allowed = std::to_string(start) + ".." + std::to_string(start + (n - 1));
  if (!iv.whole()) {
    fail(c, "value " + index_value_string(iv) + " is not an integer; " + label + " allows integers " + allowed);
  }
  fail(c, "value " + index_value_string(iv) + " is out of range for " + label + " (allowed " + allowed + ")");
}

// Whether obj is a real number (int, float, numpy's real scalars; not complex, not str).
inline bool is_real_number(PyObject* obj) {
  static PyObject* real = [] { return py::object(py::module_::import("numbers").attr("Real")).release().ptr(); }();
  const int r = PyObject_IsInstance(obj, real);
  if (r < 0) throw py::error_already_set();
  return r == 1;
}

// numpy's integer/bool/float scalar types and how to read their value in place (numpy's
// scalar objects store it right after the object header).
struct ScalarType {
  PyTypeObject* type;
  ElemType elem;
};

struct ScalarTypes {
  ScalarType types[16];
  int count = 0;
};

// int64 first: it is what numpy and gymnasium produce by default.
inline const ScalarTypes& numpy_scalar_types() {
  static const ScalarTypes types = [] {
    ScalarTypes out;
    py::module_ np = py::module_::import("numpy");
    for (const char* name : {"int64", "int32", "uint8", "int16", "int8", "uint16", "uint32", "uint64", "longlong",
                             "ulonglong", "intc", "uintc", "bool_", "float32"}) {
      if (!py::hasattr(np, name)) continue;
      py::object t = np.attr(name);
      py::dtype dt = py::dtype::from_args(t);
      ElemType elem;
      const auto size = dt.itemsize();
      switch (dt.kind()) {
        case 'b': elem = ElemType::Bool; break;
        case 'f':
          elem = ElemType::F32;
          if (size != 4) continue;
          break;
        case 'i':
          elem = size == 1 ? ElemType::I8 : size == 2 ? ElemType::I16 : size == 4 ? ElemType::I32 : ElemType::I64;
          break;
        case 'u':
          elem = size == 1 ? ElemType::U8 : size == 2 ? ElemType::U16 : size == 4 ? ElemType::U32 : ElemType::U64;
          break;
        default: continue;
      }
      out.types[out.count++] = {reinterpret_cast<PyTypeObject*>(t.ptr()), elem};
    }
    return out;
  }();
  return types;
}

// The scalar type entry of obj when it is an exact numpy integer/bool/float32 scalar.
inline const ScalarType* numpy_scalar_type(PyObject* obj) {
  const ScalarTypes& s = numpy_scalar_types();
  const PyTypeObject* t = Py_TYPE(obj);
  for (int i = 0; i < s.count; ++i) {
    if (s.types[i].type == t) return &s.types[i];
  }
  return nullptr;
}

// Where a numpy scalar stores its value (right after the object header).
inline const char* numpy_scalar_data(PyObject* obj) { return reinterpret_cast<const char*>(obj) + sizeof(PyObject); }

// The value of an exact numpy scalar, if obj is one.
inline bool read_numpy_scalar(PyObject* obj, IndexValue& iv) {
  const ScalarType* s = numpy_scalar_type(obj);
  if (s == nullptr) return false;
  iv = read_index_elem(numpy_scalar_data(obj), s->elem);
  return true;
}

// The offset of a Python int or exact numpy scalar in [start, start + n), or -1 (any other
// object, or a value that is not such an integer: the caller reports it).
inline std::int64_t fast_index_offset(PyObject* obj, std::int64_t start, std::int64_t n) {
  if (PyLong_CheckExact(obj)) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    return overflow ? -1 : index_offset(static_cast<std::int64_t>(v), start, n);
  }
  const ScalarType* s = numpy_scalar_type(obj);
  if (s == nullptr) return -1;
  const char* p = numpy_scalar_data(obj);
  if (s->elem == ElemType::I64) {  // the common case, without the type switch
    std::int64_t v;
    std::memcpy(&v, p, sizeof v);
    return index_offset(v, start, n);
  }
  std::int64_t off = -1;
  visit_elem_type(s->elem, [&](auto tag) {
    decltype(tag) v;
    std::memcpy(&v, p, sizeof v);
    off = index_offset(v, start, n);
  });
  return off;
}

inline IndexValue read_index_scalar(Collector& c, PyObject* obj, const std::string& label) {
  if (PyLong_Check(obj)) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow) fail(c, "value " + short_repr(obj) + " is out of range for " + label);
    return {true, static_cast<std::int64_t>(v), 0};
  }
  if (PyFloat_Check(obj)) return read_index_elem(reinterpret_cast<const char*>(&PyFloat_AS_DOUBLE(obj)), ElemType::F64);
  IndexValue scalar;
  if (read_numpy_scalar(obj, scalar)) return scalar;
  ArrayView a;
  if (as_array(obj, a)) {
    if (a.nd != 0) {
      fail(c, "expected a single integer for " + label + ", got an array of shape " + shape_of(a) + " and dtype " +
                  std::string(py::str(py::handle(obj).attr("dtype"))));
    }
    if (!a.numeric || !a.native) {
      py::object arr = convert_array(c, obj, false, ("a single integer for " + label).c_str());
      as_array(arr.ptr(), a);
    }
    return read_index_elem(a.data, a.type);
  }
  if (PyIndex_Check(obj)) {  // numpy integer scalars, objects with __index__
    py::object idx = py::reinterpret_steal<py::object>(PyNumber_Index(obj));
    if (!idx) throw py::error_already_set();
    return read_index_scalar(c, idx.ptr(), label);
  }
  if (is_real_number(obj)) {  // numpy float16 / float64 scalars
    py::object f = py::reinterpret_steal<py::object>(PyNumber_Float(obj));
    if (!f) throw py::error_already_set();
    return read_index_scalar(c, f.ptr(), label);
  }
  fail(c, "expected an integer for " + label + ", got " + short_repr(obj) + " (" + Py_TYPE(obj)->tp_name + ")");
}

}  // namespace rlblocks::bindings::flatten_read
