// What every binding file shares: the registration functions module.cpp calls, and the
// helpers that validate arrays and describe them in error messages (one formatter for
// shapes, one validator for `out=` arguments).
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace rlblocks {
class ReplayCore;
}

namespace rlblocks::bindings {

namespace py = pybind11;

void register_threads(py::module_& m);
void register_activations(py::module_& m);
void register_categorical(py::module_& m);
void register_flatten(py::module_& m);
void register_filters(py::module_& m);
void register_frame_stack(py::module_& m);
void register_image(py::module_& m);
void register_sequences(py::module_& m);
void register_replay(py::module_& m);
void register_her(py::module_& m);
void register_squashed_gaussian(py::module_& m);
void register_diag_gaussian(py::module_& m);
void register_dense(py::module_& m);

using Shape = std::vector<std::int64_t>;
using F32Array = py::array_t<float, py::array::c_style>;
using I64Array = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>;

// Smaller calls keep the GIL: releasing and taking it back costs more than their work.
constexpr std::int64_t kReleaseGilElems = 4096;
constexpr std::int64_t kReleaseGilBytes = 64 * 1024;

// (lead, *s)
inline Shape with_lead(std::int64_t lead, const Shape& s) {
  Shape out{lead};
  out.insert(out.end(), s.begin(), s.end());
  return out;
}

// A Python int (or an object with __index__, not a bool) as int64; ValueError naming `name`
// for anything else or a value out of int64's range.
inline std::int64_t to_int(const py::handle& obj, const std::string& name) {
  if (py::isinstance<py::bool_>(obj) || !(py::isinstance<py::int_>(obj) || py::hasattr(obj, "__index__"))) {
    throw py::value_error(name + ": expected an int, got " + std::string(py::repr(obj)));
  }
  py::int_ v(py::reinterpret_borrow<py::object>(obj));
  int overflow = 0;
  const long long r = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
  if (overflow != 0) {
    throw py::value_error(name + ": expected an int in [" + std::to_string(std::numeric_limits<std::int64_t>::min()) +
                          ", " + std::to_string(std::numeric_limits<std::int64_t>::max()) + "], got " +
                          std::string(py::repr(obj)));
  }
  if (r == -1 && PyErr_Occurred()) throw py::error_already_set();
  return static_cast<std::int64_t>(r);
}

// Runs fn on the storage of `obj` when it is a _core.ReplayCore (else returns false): with
// the GIL released and the buffer's lock held, so no add or load changes it meanwhile.
bool with_replay_core(const py::handle& obj, const std::function<void(const ReplayCore&)>& fn);

// "(3,)", "(2, 3)", "()": Python's tuple spelling.
template <class Int>
std::string shape_str(const Int* dims, std::size_t nd) {
  std::string s = "(";
  for (std::size_t i = 0; i < nd; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + (nd == 1 ? ",)" : ")");
}
inline std::string shape_str(const Shape& s) { return shape_str(s.data(), s.size()); }
inline std::string shape_str(const py::array& a) { return shape_str(a.shape(), static_cast<std::size_t>(a.ndim())); }

inline Shape array_shape(const py::array& a) { return Shape(a.shape(), a.shape() + a.ndim()); }

inline std::string dtype_str(const py::array& a) { return py::str(a.dtype()).cast<std::string>(); }

// "read-only float64 array of shape (2, 3)", or the type name of a non-array.
inline std::string describe(const py::handle& obj) {
  if (!py::isinstance<py::array>(obj)) return Py_TYPE(obj.ptr())->tp_name;
  const auto a = py::reinterpret_borrow<py::array>(obj);
  return std::string(a.writeable() ? "" : "read-only ") + ((a.flags() & py::array::c_style) ? "" : "non-contiguous ") +
         dtype_str(a) + " array of shape " + shape_str(a);
}

// `obj` as a C-contiguous float32 array (a copy only if it is not one already); a ValueError
// "fn: what must be a float32 array, got ..." for anything else.
inline py::array_t<float, py::array::c_style> float32_array(const py::object& obj, const char* fn, const char* what) {
  if (!py::isinstance<py::array>(obj) ||
      !py::reinterpret_borrow<py::array>(obj).dtype().equal(py::dtype::of<float>())) {
    throw py::value_error(std::string(fn) + ": " + what + " must be a float32 array, got " + describe(obj));
  }
  return py::array_t<float, py::array::c_style>::ensure(obj);
}

// Byte range [lo, hi) spanned by an array with non-negative strides (empty: lo == hi).
inline std::pair<std::uintptr_t, std::uintptr_t> extent(const py::array& a) {
  const auto lo = reinterpret_cast<std::uintptr_t>(a.data());
  std::uintptr_t hi = lo + static_cast<std::uintptr_t>(a.itemsize());
  for (py::ssize_t d = 0; d < a.ndim(); ++d) {
    if (a.shape(d) == 0) return {lo, lo};
    hi += static_cast<std::uintptr_t>((a.shape(d) - 1) * a.strides(d));
  }
  return {lo, hi};
}

// Whether the memory of two arrays intersects.
inline bool overlaps(const py::array& a, const py::array& b) {
  const auto x = extent(a), y = extent(b);
  return x.first < y.second && y.first < x.second;
}

// The `out=` argument of a kernel: a writeable, aligned, C-contiguous array of exactly
// `dtype` and `shape`, not overlapping `input` (when given); otherwise ValueError
// "<fn>: out must be a writeable C-contiguous <dtype> array of shape <shape>, got ...".
inline py::array checked_out(const py::handle& out, const py::dtype& dtype, const Shape& shape, const std::string& fn,
                             const py::array* input = nullptr) {
  const bool is_array = py::isinstance<py::array>(out);
  const auto a = is_array ? py::reinterpret_borrow<py::array>(out) : py::array();
  const bool ok = is_array && a.dtype().equal(dtype) && (a.flags() & py::array::c_style) && a.writeable() &&
                  (a.flags() & py::detail::npy_api::NPY_ARRAY_ALIGNED_) && array_shape(a) == shape;
  if (!ok) {
    throw py::value_error(fn + ": out must be a writeable C-contiguous " + std::string(py::str(dtype)) +
                          " array of shape " + shape_str(shape) + ", got " + describe(out));
  }
  if (input != nullptr && overlaps(a, *input)) {
    throw py::value_error(fn + ": out must not overlap the input; pass a separate output array");
  }
  return a;
}

}  // namespace rlblocks::bindings
