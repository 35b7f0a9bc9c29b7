// Bindings for SAC's squashed-Gaussian draw and its gradient: validate dtypes and shapes
// with the GIL held, then release it and run the kernel (single-threaded: SAC's batches
// are a few hundred rows, microseconds of work).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "bindings.hpp"
#include "rlblocks/squashed_gaussian.hpp"

namespace py = pybind11;

namespace rlblocks::bindings {
namespace {

// A float32 [rows, cols] array (a C-contiguous copy only if it is not already); cols < 0
// accepts any even number of columns >= 2.
F32Array matrix(const py::object& obj, const char* fn, const char* what, std::int64_t rows, std::int64_t cols) {
  F32Array a = float32_array(obj, fn, what);
  const bool ok = a.ndim() == 2 && (rows < 0 || a.shape(0) == rows) &&
                  (cols < 0 ? a.shape(1) >= 2 && a.shape(1) % 2 == 0 : a.shape(1) == cols);
  if (!ok) {
    const std::string want = cols < 0 ? "[B, 2d] (means, then log-stds; d >= 1)"
                                      : "[" + std::to_string(rows) + ", " + std::to_string(cols) + "]";
    throw py::value_error(std::string(fn) + ": " + what + " must be " + want + ", got shape " + shape_str(a));
  }
  return a;
}

LogStdBounds bounds_of(double low, double high, const char* fn) {
  if (!(low <= high)) {
    const auto repr = [](double v) { return py::repr(py::float_(v)).cast<std::string>(); };
    throw py::value_error(std::string(fn) + ": log_std bounds must satisfy low <= high (not NaN), got [" + repr(low) +
                          ", " + repr(high) + "]");
  }
  return {static_cast<float>(low), static_cast<float>(high)};
}

py::tuple sample_py(const py::object& inputs_obj, const py::object& noise_obj, double low, double high) {
  constexpr const char* fn = "squashed_gaussian_sample";
  const LogStdBounds bounds = bounds_of(low, high, fn);
  F32Array inputs = matrix(inputs_obj, fn, "inputs", -1, -1);
  const std::int64_t rows = inputs.shape(0), d = inputs.shape(1) / 2;
  F32Array noise = matrix(noise_obj, fn, "noise", rows, d);
  F32Array action({rows, d});
  F32Array logp(rows);
  const float* in = inputs.data();
  const float* eps = noise.data();
  float* act = action.mutable_data();
  float* lp = logp.mutable_data();
  {
    py::gil_scoped_release release;
    squashed_gaussian_sample(in, eps, rows, d, bounds, act, lp);
  }
  return py::make_tuple(action, logp);
}

F32Array grad_py(const py::object& inputs_obj, const py::object& noise_obj, const py::object& d_action_obj, double coef,
                 double low, double high) {
  constexpr const char* fn = "squashed_gaussian_grad";
  const LogStdBounds bounds = bounds_of(low, high, fn);
  F32Array inputs = matrix(inputs_obj, fn, "inputs", -1, -1);
  const std::int64_t rows = inputs.shape(0), d = inputs.shape(1) / 2;
  F32Array noise = matrix(noise_obj, fn, "noise", rows, d);
  F32Array d_action = matrix(d_action_obj, fn, "d_action", rows, d);
  F32Array grad({rows, 2 * d});
  const float* in = inputs.data();
  const float* eps = noise.data();
  const float* da = d_action.data();
  float* g = grad.mutable_data();
  {
    py::gil_scoped_release release;
    squashed_gaussian_grad(in, eps, da, rows, d, bounds, static_cast<float>(coef), static_cast<float>(coef * 2.0), g);
  }
  return grad;
}

}  // namespace

void register_squashed_gaussian(py::module_& m) {
  m.def("squashed_gaussian_sample", &sample_py, py::arg("inputs"), py::arg("noise"), py::arg("log_std_low"),
        py::arg("log_std_high"),
        "(action float32 [B, d], logp float32 [B]) of SAC's squashed Gaussian over [-1, 1]: inputs [B, 2d] "
        "(means, then log-stds clamped to [log_std_low, log_std_high]), noise [B, d] standard-normal draws.");
  m.def("squashed_gaussian_grad", &grad_py, py::arg("inputs"), py::arg("noise"), py::arg("d_action"), py::arg("coef"),
        py::arg("log_std_low"), py::arg("log_std_high"),
        "float32 [B, 2d]: the gradient, with respect to inputs, of sum(d_action * action) + coef * sum(logp) "
        "for squashed_gaussian_sample's draw from the same inputs and noise.");
}

}  // namespace rlblocks::bindings
