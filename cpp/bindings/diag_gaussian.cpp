// Binding for the diagonal Gaussian draw: validate dtypes and shapes with the GIL held, run
// the kernel (single-threaded: a rollout's batch is a few rows).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "bindings.hpp"
#include "rlblocks/diag_gaussian.hpp"

namespace py = pybind11;

namespace rlblocks::bindings {
namespace {

py::tuple diag_gaussian_draw_py(const py::object& inputs_obj, const py::object& noise_obj, double bound) {
  const char* fn = "diag_gaussian_draw";
  F32Array inputs = float32_array(inputs_obj, fn, "inputs");
  if (inputs.ndim() != 2 || inputs.shape(1) % 2 != 0) {
    throw py::value_error(std::string(fn) + ": inputs must be [B, 2 * d] (d means, then d log-stds), got shape " +
                          shape_str(inputs));
  }
  if (!(bound >= 0.0) || !std::isfinite(bound)) {
    throw py::value_error(std::string(fn) + ": bound must be finite and >= 0, got " +
                          py::repr(py::float_(bound)).cast<std::string>());
  }
  const std::int64_t rows = inputs.shape(0), d = inputs.shape(1) / 2;
  const float* noise = nullptr;
  F32Array normals;
  if (!noise_obj.is_none()) {
    normals = float32_array(noise_obj, fn, "noise");
    if (normals.ndim() != 2 || normals.shape(0) != rows || normals.shape(1) != d) {
      throw py::value_error(std::string(fn) + ": noise must be [B, d] = (" + std::to_string(rows) + ", " +
                            std::to_string(d) + "), got shape " + shape_str(normals));
    }
    noise = normals.data();
  }
  F32Array actions({rows, d});
  F32Array logp(rows);
  diag_gaussian_draw(inputs.data(), rows, d, noise, static_cast<float>(bound), actions.mutable_data(),
                     logp.mutable_data());
  return py::make_tuple(actions, logp);
}

}  // namespace

void register_diag_gaussian(py::module_& m) {
  m.def("diag_gaussian_draw", &diag_gaussian_draw_py, py::arg("inputs"), py::arg("noise") = py::none(),
        py::arg("bound") = 20.0,
        "(actions float32 [B, d], logp float32 [B]) for float32 inputs [B, 2d] (means, then log-stds clamped "
        "to [-bound, bound]): mean + exp(log_std) * noise for standard-normal noise [B, d], or the mean when "
        "noise is None, and the diagonal Gaussian's log-density of the action.");
}

}  // namespace rlblocks::bindings
