// Binding for the categorical draw: validate dtypes and shapes with the GIL held, run the
// kernel (single-threaded: a rollout's batch is a few rows), raise on non-finite logits.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "bindings.hpp"
#include "rlblocks/categorical.hpp"

namespace py = pybind11;

namespace rlblocks::bindings {
namespace {

using F32Array = py::array_t<float, py::array::c_style>;
using I64Array = py::array_t<std::int64_t, py::array::c_style>;

py::tuple categorical_draw_py(const py::object& logits_obj, const py::object& uniforms_obj) {
  F32Array logits = float32_array(logits_obj, "categorical_draw", "logits");
  if (logits.ndim() != 2 || logits.shape(1) < 1) {
    throw py::value_error("categorical_draw: logits must be [B, K] with K >= 1, got shape " + shape_str(logits));
  }
  const std::int64_t rows = logits.shape(0), k = logits.shape(1);
  const float* u = nullptr;
  F32Array uniforms;
  if (!uniforms_obj.is_none()) {
    uniforms = float32_array(uniforms_obj, "categorical_draw", "uniforms");
    if (uniforms.ndim() != 1 || uniforms.shape(0) != rows) {
      throw py::value_error("categorical_draw: uniforms must be [B] = [" + std::to_string(rows) + "], got shape " +
                            shape_str(uniforms));
    }
    u = uniforms.data();
  }
  I64Array index(rows);
  F32Array logp(rows);
  const std::int64_t bad = categorical_draw(logits.data(), rows, k, u, index.mutable_data(), logp.mutable_data());
  if (bad >= 0) {
    throw py::value_error("categorical_draw: the distribution inputs of row " + std::to_string(bad) +
                          " are not all finite (NaN or inf logits)");
  }
  return py::make_tuple(index, logp);
}

}  // namespace

void register_categorical(py::module_& m) {
  m.def("categorical_draw", &categorical_draw_py, py::arg("logits"), py::arg("uniforms") = py::none(),
        "(index int64 [B], logp float32 [B]) for float32 logits [B, K]: the inverse-CDF draw for "
        "uniforms [B] in [0, 1), or the first maximum when uniforms is None. Non-finite logits raise "
        "ValueError.");
}

}  // namespace rlblocks::bindings
