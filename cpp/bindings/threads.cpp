#include "bindings.hpp"
#include "rlblocks/thread_pool.hpp"

namespace rlblocks::bindings {

void register_threads(pybind11::module_& m) {
  m.def(
      "set_num_threads",
      [](int n) {
        if (n < 1) throw pybind11::value_error("set_num_threads: n must be >= 1, got " + std::to_string(n));
        pybind11::gil_scoped_release release;  // joining workers may take a moment
        ThreadPool::instance().set_num_threads(n);
      },
      pybind11::arg("n"), "Threads used by every batched kernel (the caller counts as one).");
  m.def("get_num_threads", [] { return ThreadPool::instance().num_threads(); });
}

}  // namespace rlblocks::bindings
