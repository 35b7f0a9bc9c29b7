// Bindings for the categorical draws (plain and masked): validate dtypes and shapes with
// the GIL held, run the kernel (single-threaded: a rollout's batch is a few rows), raise on
// non-finite logits and on what a masked draw refuses.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "bindings.hpp"
#include "rlblocks/categorical.hpp"

namespace py = pybind11;

namespace rlblocks::bindings {
namespace {

// uniforms_obj as [rows] float32 data (nullptr for None); ValueError naming fn otherwise.
const float* uniforms_data(const py::object& uniforms_obj, F32Array& uniforms, std::int64_t rows, const char* fn) {
  if (uniforms_obj.is_none()) return nullptr;
  uniforms = float32_array(uniforms_obj, fn, "uniforms");
  if (uniforms.ndim() != 1 || uniforms.shape(0) != rows) {
    throw py::value_error(std::string(fn) + ": uniforms must be [B] = [" + std::to_string(rows) + "], got shape " +
                          shape_str(uniforms));
  }
  return uniforms.data();
}

py::tuple categorical_draw_py(const py::object& logits_obj, const py::object& uniforms_obj) {
  F32Array logits = float32_array(logits_obj, "categorical_draw", "logits");
  if (logits.ndim() != 2 || logits.shape(1) < 1) {
    throw py::value_error("categorical_draw: logits must be [B, K] with K >= 1, got shape " + shape_str(logits));
  }
  const std::int64_t rows = logits.shape(0), k = logits.shape(1);
  F32Array uniforms;
  const float* u = uniforms_data(uniforms_obj, uniforms, rows, "categorical_draw");
  I64Array index(rows);
  F32Array logp(rows);
  const std::int64_t bad = categorical_draw(logits.data(), rows, k, u, index.mutable_data(), logp.mutable_data());
  if (bad >= 0) {
    throw py::value_error("categorical_draw: the distribution inputs of row " + std::to_string(bad) +
                          " are not all finite (NaN or inf logits)");
  }
  return py::make_tuple(index, logp);
}

py::tuple masked_categorical_draw_py(const py::object& logits_obj, const py::object& mask_obj,
                                     const py::object& uniforms_obj) {
  const char* fn = "masked_categorical_draw";
  F32Array logits = float32_array(logits_obj, fn, "logits");
  if (logits.ndim() != 2 || logits.shape(1) < 1) {
    throw py::value_error(std::string(fn) + ": logits must be [B, K] with K >= 1, got shape " + shape_str(logits));
  }
  const std::int64_t rows = logits.shape(0), k = logits.shape(1);
  F32Array mask = float32_array(mask_obj, fn, "mask");
  if (mask.ndim() != 2 || mask.shape(0) != rows || mask.shape(1) != k) {
    throw py::value_error(std::string(fn) + ": mask must be shaped as the logits " + shape_str(logits) +
                          ", got shape " + shape_str(mask));
  }
  F32Array uniforms;
  const float* u = uniforms_data(uniforms_obj, uniforms, rows, fn);
  F32Array masked({rows, k});
  I64Array index(rows);
  F32Array logp(rows);
  const MaskedDrawStatus status = masked_categorical_draw(logits.data(), mask.data(), rows, k, u, masked.mutable_data(),
                                                          index.mutable_data(), logp.mutable_data());
  const std::string row = std::to_string(status.row);
  switch (status.why) {
    case MaskedRefusal::kNone: break;
    case MaskedRefusal::kNoLegalEntry:
      throw py::value_error(std::string(fn) + ": mask row " + row + " has no entry > 0 (no legal action)");
    case MaskedRefusal::kAllBelowFloor:
      throw py::value_error(std::string(fn) + ": row " + row +
                            " has no legal logit above -1e8 (a logit <= -1e8 counts as masked)");
    case MaskedRefusal::kNotFinite:
      throw py::value_error(std::string(fn) + ": the distribution inputs of row " + row +
                            " are not all finite (NaN or inf logits)");
  }
  return py::make_tuple(masked, index, logp);
}

}  // namespace

void register_categorical(py::module_& m) {
  m.def("categorical_draw", &categorical_draw_py, py::arg("logits"), py::arg("uniforms") = py::none(),
        "(index int64 [B], logp float32 [B]) for float32 logits [B, K]: the inverse-CDF draw for "
        "uniforms [B] in [0, 1), or the first maximum when uniforms is None. Non-finite logits raise "
        "ValueError.");
  m.def("masked_categorical_draw", &masked_categorical_draw_py, py::arg("logits"), py::arg("mask"),
        py::arg("uniforms") = py::none(),
        "(masked float32 [B, K], index int64 [B], logp float32 [B]) for float32 logits [B, K] and mask [B, K]: "
        "masked is the logits with FLOAT_MIN where mask <= 0; the draw is categorical_draw's on masked with "
        "every value <= -1e8 at FLOAT_MIN. ValueError (nothing drawn) for a mask row without an entry > 0, "
        "then a row with no value above -1e8, then non-finite logits.");
}

}  // namespace rlblocks::bindings
