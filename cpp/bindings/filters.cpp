// Bindings for running statistics and the fused MeanStdFilter step.
//
// Inputs are converted and validated with the GIL held (shape, dtype, NaN/inf, the out=
// buffer); nothing is updated unless the whole batch is valid. The moments, merges and
// normalisation then run with the GIL released on raw pointers.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "rlblocks/checked.hpp"
#include "rlblocks/running_stat.hpp"

namespace py = pybind11;

namespace rlblocks::bindings {
namespace {

std::string batch_shape_str(const Shape& s) {
  std::string r = "(B";
  for (auto d : s) r += ", " + std::to_string(d);
  return r + (s.empty() ? ",)" : ")");
}

std::int64_t numel(const Shape& s) { return checked_product(s, "shape: number of elements"); }

struct PyRunningStat {
  explicit PyRunningStat(const Shape& shp) : shape(shp), stat(numel(shp)) {}
  PyRunningStat(const PyRunningStat& o) : shape(o.shape), stat(o.stat) {}
  Shape shape;
  RunningStat stat;
};

Shape parse_shape(const py::handle& obj) {
  if (py::isinstance<py::str>(obj) || !py::isinstance<py::sequence>(obj)) {
    throw py::value_error("shape: expected a tuple of non-negative ints, got " + std::string(py::repr(obj)));
  }
  Shape s;
  for (py::handle d : py::reinterpret_borrow<py::sequence>(obj)) {
    if (!py::isinstance<py::int_>(d) && !py::hasattr(d, "__index__")) {
      throw py::value_error("shape: expected a tuple of non-negative ints, got " + std::string(py::repr(obj)));
    }
    const auto v = py::cast<std::int64_t>(py::int_(py::reinterpret_borrow<py::object>(d)));
    if (v < 0) throw py::value_error("shape: dimensions must be >= 0, got " + std::string(py::repr(obj)));
    s.push_back(v);
  }
  // The state holds several float64 arrays of this many elements: refuse a size that
  // wraps or that no allocation could hold, before anything is allocated.
  const std::int64_t n = checked_product(s, "shape: number of elements");
  if (n > (std::int64_t{1} << 40)) {
    throw py::value_error("shape: " + shape_str(s) + " has " + std::to_string(n) +
                          " elements; at most 2**40 are allowed");
  }
  return s;
}

// An input converted to a C-contiguous float32 or float64 array.
struct Input {
  py::array arr;
  bool f32 = false;
  bool batch = false;
  std::int64_t rows = 0;
  Shape shape;  // the array's full shape
  const void* data() const { return arr.data(); }
};

Input convert_input(const py::handle& obj, const Shape& shape, bool allow_single, bool allow_batch, const char* name) {
  py::array raw = py::array::ensure(obj);
  if (!raw) {
    PyErr_Clear();
    throw py::value_error(std::string(name) + ": expected an array of numbers, got " + std::string(py::repr(obj)));
  }
  const char kind = raw.dtype().kind();
  if (kind != 'b' && kind != 'i' && kind != 'u' && kind != 'f') {
    throw py::value_error(std::string(name) + ": expected real numbers (bool, int or float), got dtype " +
                          std::string(py::str(raw.dtype())));
  }
  Input in;
  in.shape = array_shape(raw);
  const std::size_t nd = shape.size();
  const bool single = allow_single && in.shape == shape;
  const bool batch = allow_batch && in.shape.size() == nd + 1 && Shape(in.shape.begin() + 1, in.shape.end()) == shape;
  if (!single && !batch) {
    std::string want = allow_single && allow_batch ? shape_str(shape) + " or a batch " + batch_shape_str(shape)
                       : allow_single              ? shape_str(shape)
                                                   : batch_shape_str(shape);
    throw py::value_error(std::string(name) + ": expected shape " + want + ", got " + shape_str(in.shape));
  }
  in.batch = !single;
  in.rows = single ? 1 : in.shape[0];
  in.f32 = kind == 'f' && raw.itemsize() == 4;
  if (in.f32) {
    in.arr = py::array_t < float, py::array::c_style | py::array::forcecast > ::ensure(raw);
  } else {
    in.arr = py::array_t < double, py::array::c_style | py::array::forcecast > ::ensure(raw);
  }
  if (!in.arr) throw py::error_already_set();
  return in;
}

// "[..., 1, 2]": where feature `col` of a stat of shape `shape` sits in x (one observation
// or a batch).
std::string column_str(std::int64_t col, const Shape& shape) {
  std::vector<std::int64_t> idx(shape.size());
  for (std::size_t k = shape.size(); k-- > 0;) {
    idx[k] = shape[k] > 0 ? col % shape[k] : 0;
    col = shape[k] > 0 ? col / shape[k] : 0;
  }
  std::string s = "[...";
  for (auto v : idx) s += ", " + std::to_string(v);
  return s + "]";
}

std::string float_repr(double v) { return py::repr(py::float_(v)).cast<std::string>(); }

// ValueError for a finite input the running statistics cannot take: feature `col`'s
// moments or its merge with the stats (whose mean there is `ref`, 0 for a batch's own
// moments) overflow float64. Names the column and its value farthest from `ref`.
template <class T>
[[noreturn]] void raise_overflow(const T* x, std::int64_t rows, std::int64_t dim, std::int64_t col, double ref,
                                 bool merge, const Shape& shape, const char* name) {
  if (col == -2) {
    throw py::value_error(std::string(name) + ": the number of pushes would exceed int64; nothing was updated");
  }
  double value = 0.0, far = -1.0;
  for (std::int64_t r = 0; r < rows; ++r) {
    const double v = static_cast<double>(x[r * dim + col]);
    const double dist = std::fabs(v - ref);
    if (dist > far) {
      far = dist;
      value = v;
    }
  }
  const std::string why = merge
                              ? "its squared deviation from the running mean " + float_repr(ref) + " overflows float64"
                              : std::string("the squared deviations of this column overflow float64");
  throw py::value_error(std::string(name) + column_str(col, shape) + " = " + float_repr(value) +
                        " cannot be added to the running statistics: " + why + "; nothing was updated");
}

template <class T>
[[noreturn]] void raise_nonfinite(const T* x, std::int64_t n, const Input& in, std::int64_t dim, const Shape& shape,
                                  const char* name) {
  const std::int64_t i = first_nonfinite(x, n);
  const std::int64_t far = i < 0 ? first_untracked(x, n) : -1;
  if (far >= 0) {
    throw py::value_error(std::string(name) + column_str(far % dim, shape) + " = " +
                          float_repr(static_cast<double>(x[far])) +
                          " cannot be added to the running statistics: values beyond +-2**479 (about 1.6e+144) "
                          "cannot be tracked (squared deviations from them overflow float64); nothing was updated");
  }
  if (i < 0)
    raise_overflow(x, in.rows, dim, std::max<std::int64_t>(0, first_overflowing_column(x, in.rows, dim)), 0.0, false,
                   shape, name);
  // Unravel i into an index of the input.
  std::vector<std::int64_t> idx(in.shape.size());
  std::int64_t rem = i;
  for (std::size_t k = in.shape.size(); k-- > 0;) {
    const std::int64_t dim_k = in.shape[k];
    idx[k] = dim_k > 0 ? rem % dim_k : 0;
    rem = dim_k > 0 ? rem / dim_k : 0;
  }
  std::string where;
  for (auto v : idx) where += "[" + std::to_string(v) + "]";
  std::ostringstream val;
  val << static_cast<double>(x[i]);
  throw py::value_error(std::string(name) + where + " is " + val.str() +
                        "; observations must be finite (no NaN or infinity); nothing was updated");
}

// Moments of an input whose every value is tracked (finite, within +-kMaxTracked); false
// otherwise, or when they overflow.
bool moments_of(const Input& in, std::int64_t dim, Moments& m) {
  if (in.f32) return batch_moments(static_cast<const float*>(in.data()), in.rows, dim, m);
  const auto* x = static_cast<const double*>(in.data());
  return first_untracked(x, in.rows * dim) < 0 && batch_moments(x, in.rows, dim, m);
}

// ValueError for an input whose moments failed: its first NaN/inf, or the column that overflows.
[[noreturn]] void raise_bad_input(const Input& in, std::int64_t dim, const Shape& shape, const char* name) {
  const std::int64_t n = in.rows * dim;
  if (in.f32) raise_nonfinite(static_cast<const float*>(in.data()), n, in, dim, shape, name);
  raise_nonfinite(static_cast<const double*>(in.data()), n, in, dim, shape, name);
}

// ValueError for a finite input whose merge into a stat (mean `mean`) overflows at `col`.
[[noreturn]] void raise_merge_overflow(const Input& in, std::int64_t dim, std::int64_t col, const RunningStat& stat,
                                       const Shape& shape, const char* name) {
  const double ref = col >= 0 && stat.n() > 0 ? stat.state().mean[static_cast<std::size_t>(col)] : 0.0;
  if (in.f32) raise_overflow(static_cast<const float*>(in.data()), in.rows, dim, col, ref, true, shape, name);
  raise_overflow(static_cast<const double*>(in.data()), in.rows, dim, col, ref, true, shape, name);
}

// Validated moments of an input (GIL released for large inputs); raises on NaN/inf.
Moments checked_moments(const Input& in, std::int64_t dim, const Shape& shape, const char* name) {
  Moments m(dim);
  bool ok;
  if (in.rows * dim >= kReleaseGilElems) {
    py::gil_scoped_release release;
    ok = moments_of(in, dim, m);
  } else {
    ok = moments_of(in, dim, m);
  }
  if (!ok) raise_bad_input(in, dim, shape, name);
  return m;
}

py::array_t<double> to_array(const std::vector<double>& v, const Shape& shape) {
  py::array_t<double> a(shape);
  if (!v.empty()) std::memcpy(a.mutable_data(), v.data(), v.size() * sizeof(double));
  return a;
}

std::vector<double> from_array(const py::dict& state, const char* key, const Shape& shape) {
  if (!state.contains(key)) throw py::value_error(std::string("state: missing key '") + key + "'");
  py::handle obj = state[key];
  py::array raw = py::array::ensure(obj);
  if (!raw) {
    PyErr_Clear();
    throw py::value_error(std::string("state['") + key + "']: expected an array");
  }
  const char kind = raw.dtype().kind();
  if (kind != 'i' && kind != 'u' && kind != 'f') {
    throw py::value_error(std::string("state['") + key + "']: expected numbers, got dtype " +
                          std::string(py::str(raw.dtype())));
  }
  if (array_shape(raw) != shape) {
    throw py::value_error(std::string("state['") + key + "']: expected shape " + shape_str(shape) + ", got " +
                          shape_str(array_shape(raw)));
  }
  auto arr = py::array_t < double, py::array::c_style | py::array::forcecast > ::ensure(raw);
  std::vector<double> v(arr.data(), arr.data() + arr.size());
  for (double x : v) {
    if (!std::isfinite(x)) throw py::value_error(std::string("state['") + key + "']: values must be finite");
  }
  return v;
}

std::int64_t count_from(const py::dict& state, const char* key) {
  if (!state.contains(key)) throw py::value_error(std::string("state: missing key '") + key + "'");
  py::handle obj = state[key];
  if (py::isinstance<py::bool_>(obj) || !(py::isinstance<py::int_>(obj) || py::hasattr(obj, "__index__"))) {
    throw py::value_error(std::string("state['") + key + "']: expected a non-negative int, got " +
                          std::string(py::repr(obj)));
  }
  const py::int_ big(py::reinterpret_borrow<py::object>(obj));
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(big.ptr(), &overflow);
  if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
  if (overflow != 0 || v < 0) {
    throw py::value_error(std::string("state['") + key + "']: expected a non-negative int below 2**63, got " +
                          std::string(py::repr(obj)));
  }
  return static_cast<std::int64_t>(v);
}

py::dict get_state(const PyRunningStat& s) {
  const RunningStat::State st = s.stat.state();
  py::dict d;
  d["num_pushes"] = st.n;
  d["num_pushes_delta"] = st.n_delta;
  d["mean_array"] = to_array(st.mean, s.shape);
  d["mean_delta_array"] = to_array(st.mean_delta, s.shape);
  d["sum_sq_diff_array"] = to_array(st.ssd, s.shape);
  d["sum_sq_diff_delta_array"] = to_array(st.ssd_delta, s.shape);
  return d;
}

// ValueError unless `values` (the field `key` of a stat with `n` pushes counted in
// `count_key`) are all 0 while n is 0 (a stat without pushes has no mean and no spread),
// within +-kMaxTracked when `tracked` (the running mean: beyond it every later ordinary
// value's squared deviation would overflow), and >= 0 when `sums` (sums of squares).
// The delta fields are RLlib's drift since creation, not moments: only their sign (for
// sums) and their zero state are fixed.
void check_field(const std::vector<double>& values, const char* key, std::int64_t n, const char* count_key,
                 bool tracked, bool sums) {
  for (double v : values) {
    if (tracked && !(std::fabs(v) <= kMaxTracked)) {
      throw py::value_error(std::string("state['") + key +
                            "']: values must lie within +-2**479 (the range of tracked values), got " + float_repr(v));
    }
    if (sums && !(v >= 0.0)) {
      throw py::value_error(std::string("state['") + key + "']: values must be >= 0 (sums of squares), got " +
                            float_repr(v));
    }
    if (n == 0 && v != 0.0) {
      throw py::value_error(std::string("state['") + key + "']: must be 0 while state['" + count_key + "'] is 0, got " +
                            float_repr(v));
    }
  }
}

void set_state(PyRunningStat& s, const py::object& obj) {
  if (!py::isinstance<py::dict>(obj)) {
    throw py::value_error(std::string("state: expected a dict, got ") + Py_TYPE(obj.ptr())->tp_name);
  }
  const auto d = py::reinterpret_borrow<py::dict>(obj);
  RunningStat::State st;
  st.n = count_from(d, "num_pushes");
  st.n_delta = count_from(d, "num_pushes_delta");
  st.mean = from_array(d, "mean_array", s.shape);
  st.mean_delta = from_array(d, "mean_delta_array", s.shape);
  st.ssd = from_array(d, "sum_sq_diff_array", s.shape);
  st.ssd_delta = from_array(d, "sum_sq_diff_delta_array", s.shape);
  check_field(st.mean, "mean_array", st.n, "num_pushes", true, false);
  check_field(st.mean_delta, "mean_delta_array", st.n_delta, "num_pushes_delta", false, false);
  check_field(st.ssd, "sum_sq_diff_array", st.n, "num_pushes", false, true);
  check_field(st.ssd_delta, "sum_sq_diff_delta_array", st.n_delta, "num_pushes_delta", false, true);
  s.stat.set_state(st);
}

void push_input(PyRunningStat& s, const py::handle& x, bool allow_single, bool allow_batch) {
  const Input in = convert_input(x, s.shape, allow_single, allow_batch, "x");
  const Moments m = checked_moments(in, s.stat.dim(), s.shape, "x");
  const std::int64_t bad = s.stat.try_merge(m);
  if (bad != -1) raise_merge_overflow(in, s.stat.dim(), bad, s.stat, s.shape, "x");
}

py::array_t<float> float_array(const std::vector<float>& v, const Shape& shape) {
  py::array_t<float> a(shape);
  if (!v.empty()) std::memcpy(a.mutable_data(), v.data(), v.size() * sizeof(float));
  return a;
}

py::array_t<float> out_array(const py::object& out, const Input& in) {
  if (out.is_none()) return py::array_t<float>(in.shape);
  const py::array a = checked_out(out, py::dtype::of<float>(), in.shape, "mean_std_filter");
  // Only exact in-place use (same float32 buffer) is allowed; any other overlap would race.
  if (a.nbytes() > 0 && overlaps(a, in.arr) && !(in.f32 && a.data() == in.arr.data())) {
    throw py::value_error(
        "mean_std_filter: out overlaps the input; pass the float32 input itself (in place) "
        "or a separate array");
  }
  return py::reinterpret_borrow<py::array_t<float>>(a);
}

// One MeanStdFilter call: optionally push x into `running` and `buffer`, then normalise x
// with running's stats (after the push). Returns float32 of x's shape.
py::array_t<float> filter_step(PyRunningStat& running, PyRunningStat& buffer, const py::handle& x, bool update,
                               bool demean, bool destd, double clip, const py::object& out) {
  if (running.shape != buffer.shape) {
    throw py::value_error("buffer: shape " + shape_str(buffer.shape) + " differs from the running stats' " +
                          shape_str(running.shape));
  }
  if (std::isnan(clip) || clip <= 0) {
    throw py::value_error("clip: expected a positive number or inf (no clipping), got " + std::to_string(clip));
  }
  const Input in = convert_input(x, running.shape, true, true, "x");
  py::array_t<float> result = out_array(out, in);
  const std::int64_t dim = running.stat.dim();
  const std::int64_t total = in.rows * dim;
  float* dst = result.mutable_data();
  Moments m(dim);
  std::vector<double> mean(static_cast<std::size_t>(dim)), denom(static_cast<std::size_t>(dim));
  std::int64_t bad = -1;  // a feature whose merge overflows (nothing was changed)
  bool in_buffer = false;
  auto run = [&]() -> bool {
    if (update) {
      if (!moments_of(in, dim, m)) return false;  // checks NaN/inf before anything changes
      bad = RunningStat::merge_pair_and_norm_params(running.stat, buffer.stat, &m, demean, destd, mean.data(),
                                                    denom.data(), in_buffer);
      if (bad != -1) return true;
    } else {
      // Without an update the input must still be finite (the same contract either way).
      const bool finite = in.f32 ? first_nonfinite(static_cast<const float*>(in.data()), total) < 0
                                 : first_nonfinite(static_cast<const double*>(in.data()), total) < 0;
      if (!finite) return false;
      running.stat.norm_params(demean, destd, mean.data(), denom.data());
    }
    if (in.f32) {
      normalize_rows(static_cast<const float*>(in.data()), in.rows, dim, mean.data(), denom.data(), clip, dst);
    } else {
      normalize_rows(static_cast<const double*>(in.data()), in.rows, dim, mean.data(), denom.data(), clip, dst);
    }
    return true;
  };
  bool ok;
  if (total >= kReleaseGilElems) {
    py::gil_scoped_release release;
    ok = run();
  } else {
    ok = run();
  }
  if (!ok) raise_bad_input(in, dim, running.shape, "x");
  if (bad != -1) raise_merge_overflow(in, dim, bad, in_buffer ? buffer.stat : running.stat, running.shape, "x");
  return result;
}

py::tuple shape_tuple(const Shape& s) {
  py::tuple t(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) t[i] = py::int_(s[i]);
  return t;
}

}  // namespace

void register_filters(py::module_& m) {
  py::class_<PyRunningStat>(m, "RunningStat", "Running mean/variance (float64) with exact batched updates and merges.")
      .def(py::init([](const py::object& shape) { return new PyRunningStat(parse_shape(shape)); }), py::arg("shape"))
      .def_property_readonly("shape", [](const PyRunningStat& s) { return shape_tuple(s.shape); })
      .def_property_readonly("n", [](const PyRunningStat& s) { return s.stat.n(); })
      .def_property_readonly("n_delta", [](const PyRunningStat& s) { return s.stat.delta().n; })
      .def_property_readonly("mean", [](const PyRunningStat& s) { return to_array(s.stat.state().mean, s.shape); })
      .def_property_readonly("var",
                             [](const PyRunningStat& s) {
                               std::vector<float> v(static_cast<std::size_t>(s.stat.dim()));
                               s.stat.var_std(v.data(), nullptr);
                               return float_array(v, s.shape);
                             })
      .def_property_readonly("std",
                             [](const PyRunningStat& s) {
                               std::vector<float> v(static_cast<std::size_t>(s.stat.dim()));
                               s.stat.var_std(nullptr, v.data());
                               return float_array(v, s.shape);
                             })
      .def(
          "push", [](PyRunningStat& s, const py::handle& x) { push_input(s, x, true, false); }, py::arg("x"))
      .def(
          "push_batch", [](PyRunningStat& s, const py::handle& x) { push_input(s, x, false, true); }, py::arg("x"))
      .def(
          "update",
          [](PyRunningStat& s, const PyRunningStat& other) {
            if (other.shape != s.shape) {
              throw py::value_error("update: other has shape " + shape_str(other.shape) + ", expected " +
                                    shape_str(s.shape));
            }
            const DeltaState d = other.stat.delta();  // snapshot first: other may be s itself
            const std::int64_t bad = s.stat.update(d);
            if (bad == -2)
              throw py::value_error("update: the number of pushes would exceed int64; nothing was updated");
            if (bad >= 0) {
              throw py::value_error("update: merging other's statistics overflows float64 at " +
                                    column_str(bad, s.shape) + " (mean " +
                                    float_repr(d.mean[static_cast<std::size_t>(bad)]) + "); nothing was updated");
            }
          },
          py::arg("other"))
      .def("copy", [](const PyRunningStat& s) { return new PyRunningStat(s); })
      .def("reset", [](PyRunningStat& s) { s.stat.reset(); })
      .def("get_state", &get_state)
      .def("set_state", &set_state, py::arg("state"))
      .def(py::pickle([](const PyRunningStat& s) { return py::make_tuple(shape_tuple(s.shape), get_state(s)); },
                      [](const py::tuple& t) {
                        if (t.size() != 2) throw py::value_error("RunningStat: invalid pickled state");
                        auto s = std::make_unique<PyRunningStat>(parse_shape(t[0]));
                        set_state(*s, t[1]);
                        return s;
                      }));

  m.def("mean_std_filter", &filter_step, py::arg("running"), py::arg("buffer"), py::arg("x"), py::arg("update"),
        py::arg("demean"), py::arg("destd"), py::arg("clip"), py::arg("out") = py::none(),
        "Push x (one observation or a batch) into running and buffer, then normalise it with the "
        "running stats; float32 output of x's shape.");
}

}  // namespace rlblocks::bindings
