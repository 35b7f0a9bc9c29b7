// Binding for the fused dense-layer stack: validate the batch and every layer (dtype, rank,
// widths, activation) with the GIL held, then release it and run the kernel.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "rlblocks/checked.hpp"
#include "rlblocks/dense.hpp"

namespace py = pybind11;

namespace rlblocks::bindings {
namespace {

constexpr const char* kFn = "dense_forward";

DenseActivation activation_of(const py::handle& obj, const std::string& where) {
  if (obj.is_none()) return DenseActivation::kLinear;
  if (py::isinstance<py::str>(obj)) {
    const auto name = obj.cast<std::string>();
    if (name == "tanh") return DenseActivation::kTanh;
    if (name == "relu") return DenseActivation::kRelu;
  }
  throw py::value_error(std::string(kFn) + ": " + where + " activation must be None, 'tanh' or 'relu', got " +
                        py::repr(obj).cast<std::string>());
}

py::array dense_forward_py(const py::object& x_obj, const py::object& layers_obj) {
  F32Array x = float32_array(x_obj, kFn, "x");
  if (x.ndim() != 2) {
    throw py::value_error(std::string(kFn) + ": x must be [B, in], got shape " + shape_str(x));
  }
  if (!py::isinstance<py::list>(layers_obj) && !py::isinstance<py::tuple>(layers_obj)) {
    throw py::value_error(std::string(kFn) + ": layers must be a list of (weight, bias, activation) tuples, got " +
                          describe(layers_obj));
  }
  const auto seq = py::reinterpret_borrow<py::sequence>(layers_obj);
  const std::int64_t rows = x.shape(0);
  std::int64_t width = x.shape(1), widest = 0;
  std::vector<F32Array> keep;  // the arrays the kernel reads, alive while the GIL is released
  std::vector<DenseLayer> layers;
  const auto n = static_cast<std::size_t>(py::len(seq));
  for (std::size_t l = 0; l < n; ++l) {
    const std::string where = "layers[" + std::to_string(l) + "]";
    const py::object item = seq[l];
    if (!py::isinstance<py::tuple>(item) || py::len(item) != 3) {
      throw py::value_error(
          std::string(kFn) + ": " + where + " must be a (weight, bias, activation) tuple, got " +
          (py::isinstance<py::tuple>(item) ? "a tuple of length " + std::to_string(py::len(item)) : describe(item)));
    }
    const auto t = py::reinterpret_borrow<py::tuple>(item);
    F32Array w = float32_array(t[0], kFn, (where + " weight").c_str());
    if (w.ndim() != 2 || w.shape(1) != width) {
      throw py::value_error(std::string(kFn) + ": " + where + " weight must be [out, " + std::to_string(width) +
                            "] (its input's width), got shape " + shape_str(w));
    }
    const std::int64_t out = w.shape(0);
    F32Array b = float32_array(t[1], kFn, (where + " bias").c_str());
    if (b.ndim() != 1 || b.shape(0) != out) {
      throw py::value_error(std::string(kFn) + ": " + where + " bias must be of shape (" + std::to_string(out) +
                            ",), got shape " + shape_str(b));
    }
    const DenseActivation act = activation_of(t[2], where);
    layers.push_back({w.data(), b.data(), width, out, act});
    keep.push_back(std::move(w));
    keep.push_back(std::move(b));
    if (l + 1 < n && out > widest) widest = out;
    width = out;
  }
  checked_mul(rows, widest, "dense_forward's hidden activations (B * width)");
  F32Array result({rows, width});
  {
    py::gil_scoped_release nogil;
    dense_forward(x.data(), rows, layers.data(), static_cast<std::int64_t>(layers.size()), x.shape(1),
                  result.mutable_data());
  }
  return std::move(result);
}

}  // namespace

void register_dense(py::module_& m) {
  m.def("dense_forward", &dense_forward_py, py::arg("x"), py::arg("layers"),
        "A stack of dense layers over a float32 batch x [B, in]: for each (weight [out, in], bias [out], "
        "activation None / 'tanh' / 'relu') of layers, x = activation(x @ weight.T + bias); returns the last x "
        "(float32 [B, out], a new array; x itself copied without layers).");
}

}  // namespace rlblocks::bindings
