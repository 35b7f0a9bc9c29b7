// Binding for the vectorised float32 tanh: validate dtype, shapes and the out= buffer with
// the GIL held, then release it (large arrays) and run the kernel, split over the pool.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "rlblocks/activations.hpp"
#include "rlblocks/thread_pool.hpp"

namespace py = pybind11;

namespace rlblocks::bindings {
namespace {

constexpr std::int64_t kParallelGrain = 1 << 16;  // elements per chunk on the pool

py::array tanh_py(const py::object& x_obj, const py::object& out_obj) {
  py::array x = py::array::ensure(x_obj);
  if (!x) {
    PyErr_Clear();
    throw py::value_error("tanh: expected a float32 array, got " + std::string(py::str(py::type::of(x_obj))));
  }
  if (!x.dtype().equal(py::dtype::of<float>())) {
    throw py::value_error("tanh: expected float32, got dtype " + std::string(py::str(x.dtype())));
  }
  F32Array in = F32Array::ensure(x);  // a C-contiguous copy only if x is not already
  const std::int64_t n = static_cast<std::int64_t>(in.size());
  F32Array out;
  if (out_obj.is_none()) {
    out = F32Array(std::vector<py::ssize_t>(in.shape(), in.shape() + in.ndim()));
  } else {
    auto o = checked_out(out_obj, py::dtype::of<float>(), array_shape(in), "tanh");
    if (o.data() != in.data() && overlaps(o, in)) {
      throw py::value_error("tanh: out partly overlaps the input (only out=x, in place, may share memory)");
    }
    out = py::reinterpret_borrow<F32Array>(o);
  }
  const float* src = in.data();
  float* dst = out.mutable_data();
  auto run = [&] {
    parallel_for((n + 7) / 8, kParallelGrain / 8, [&](std::int64_t b, std::int64_t e) {
      const std::int64_t lo = b * 8, hi = std::min<std::int64_t>(e * 8, n);
      tanh_f32(src + lo, dst + lo, hi - lo);
    });
  };
  if (n >= kReleaseGilElems) {
    py::gil_scoped_release nogil;
    run();
  } else {
    run();
  }
  return std::move(out);
}

}  // namespace

void register_activations(py::module_& m) {
  m.def("tanh", &tanh_py, py::arg("x"), py::arg("out") = py::none(),
        "Elementwise tanh of a float32 array (AVX2 where available, about 1 ulp), into out "
        "(which may be x) or a new array.");
}

}  // namespace rlblocks::bindings
