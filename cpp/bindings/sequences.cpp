// Bindings for the sequence kernels: validate every array with the GIL held (lengths, shapes,
// dtypes, permutation), allocate the outputs, then release the GIL and run the kernels.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "rlblocks/checked.hpp"
#include "rlblocks/sequences.hpp"

namespace py = pybind11;

namespace rlblocks::bindings {
namespace {

// A 1-D C-contiguous int64 view (or converted copy) of an integer array-like; `what` names it
// in errors.
I64Array int_array(const py::handle& obj, const char* what) {
  py::array a = py::array::ensure(obj);
  if (!a) {
    PyErr_Clear();
    throw py::value_error(std::string(what) + ": expected a 1-D integer array");
  }
  const char kind = a.dtype().kind();
  if (kind != 'i' && kind != 'u' && kind != 'b') {
    throw py::value_error(std::string(what) + ": expected integers, got dtype " + std::string(py::str(a.dtype())));
  }
  if (a.ndim() != 1) throw py::value_error(std::string(what) + ": expected a 1-D array, got shape " + shape_str(a));
  auto as64 = I64Array::ensure(a);
  if (kind == 'u' && a.dtype().itemsize() == 8) {  // uint64 above int64 max would wrap
    auto u = py::array_t < std::uint64_t, py::array::c_style | py::array::forcecast > ::ensure(a);
    for (py::ssize_t i = 0; i < u.shape(0); ++i) {
      if (u.data()[i] > static_cast<std::uint64_t>(INT64_MAX)) {
        throw py::value_error(std::string(what) + "[" + std::to_string(i) + "] = " + std::to_string(u.data()[i]) +
                              " does not fit in int64");
      }
    }
  }
  return as64;
}

std::vector<std::int64_t> int_vector(const py::handle& obj, const char* what) {
  I64Array a = int_array(obj, what);
  return std::vector<std::int64_t>(a.data(), a.data() + a.shape(0));
}

py::array_t<std::int32_t> seq_lens_from_ids_py(const py::object& episode_ids, const py::object& agent_indices,
                                               const py::object& unroll_ids, std::int64_t max_seq_len) {
  if (max_seq_len < 1) throw py::value_error("max_seq_len must be >= 1, got " + std::to_string(max_seq_len));
  checked_narrow<std::int32_t>(max_seq_len, "max_seq_len");  // the lengths are int32
  if (episode_ids.is_none()) throw py::value_error("episode_ids are required when seq_lens are not given");
  const I64Array eps = int_array(episode_ids, "episode_ids");
  const std::int64_t n = eps.shape(0);
  I64Array agent, unroll;
  auto other = [&](const py::object& obj, const char* what, I64Array& v) -> const std::int64_t* {
    if (obj.is_none()) return nullptr;
    v = int_array(obj, what);
    if (v.shape(0) != n) {
      throw py::value_error(std::string(what) + " has " + std::to_string(v.shape(0)) + " rows, episode_ids has " +
                            std::to_string(n));
    }
    return v.data();
  };
  const std::int64_t* agent_ptr = other(agent_indices, "agent_indices", agent);
  const std::int64_t* unroll_ptr = other(unroll_ids, "unroll_ids", unroll);
  std::vector<std::int32_t> lens;
  {
    py::gil_scoped_release release;  // raw pointers into arrays held above
    seq_lens_from_ids(eps.data(), agent_ptr, unroll_ptr, n, max_seq_len, lens);
  }
  py::array_t<std::int32_t> out(static_cast<py::ssize_t>(lens.size()));
  if (!lens.empty()) std::memcpy(out.mutable_data(), lens.data(), lens.size() * sizeof(std::int32_t));
  return out;
}

// Leaf `idx` of a batch as a C-contiguous array (a copy only if it is not one already).
py::array leaf_array(const py::handle& item, std::size_t idx) {
  py::array a = py::array::ensure(item, py::array::c_style);
  if (!a) {
    PyErr_Clear();
    throw py::value_error("leaf " + std::to_string(idx) + ": expected an array, got " +
                          std::string(py::str(py::type::of(item))));
  }
  if (a.dtype().kind() == 'O') {
    throw py::value_error("leaf " + std::to_string(idx) + ": object arrays are not supported by the native kernel");
  }
  return a;
}

// A new array like `a` with `rows` rows.
py::array with_rows(const py::array& a, std::int64_t rows) {
  std::vector<py::ssize_t> shape(a.shape(), a.shape() + a.ndim());
  shape[0] = static_cast<py::ssize_t>(rows);
  return py::array(a.dtype(), shape);
}

// Bytes of one row of a C-contiguous array.
std::int64_t row_bytes(const py::array& a) {
  std::int64_t bytes = a.dtype().itemsize();
  for (py::ssize_t d = 1; d < a.ndim(); ++d) bytes = checked_mul(bytes, a.shape(d), "row bytes");
  return bytes;
}

py::list pad_sequences_py(const py::list& leaves, const py::object& seq_lens_obj, std::int64_t max_seq_len,
                          bool pad_last, const py::object& order_obj) {
  if (max_seq_len < 0) throw py::value_error("max_seq_len must be >= 0, got " + std::to_string(max_seq_len));
  const std::vector<std::int64_t> lens64 = int_vector(seq_lens_obj, "seq_lens");
  const auto num_seq = static_cast<std::int64_t>(lens64.size());
  std::vector<std::int32_t> lens(lens64.size());
  std::vector<std::int64_t> starts(lens64.size());
  std::int64_t rows = 0;
  for (std::size_t k = 0; k < lens64.size(); ++k) {
    const std::int64_t len = lens64[k];
    if (len < 0 || len > max_seq_len) {
      throw py::value_error("seq_lens[" + std::to_string(k) + "] = " + std::to_string(len) +
                            " is outside [0, max_seq_len=" + std::to_string(max_seq_len) + "]");
    }
    lens[k] = checked_narrow<std::int32_t>(len, "seq_lens");
    starts[k] = rows;
    rows = checked_add(rows, len, "seq_lens: total rows");
  }
  std::vector<std::int64_t> order;
  if (!order_obj.is_none()) {
    order = int_vector(order_obj, "order");
    if (static_cast<std::int64_t>(order.size()) != num_seq) {
      throw py::value_error("order has " + std::to_string(order.size()) + " entries, expected one per sequence (" +
                            std::to_string(num_seq) + ")");
    }
    std::vector<char> seen(order.size(), 0);
    for (std::size_t s = 0; s < order.size(); ++s) {
      const std::int64_t k = order[s];
      if (k < 0 || k >= num_seq || seen[static_cast<std::size_t>(k)]) {
        throw py::value_error("order must be a permutation of range(" + std::to_string(num_seq) + "); order[" +
                              std::to_string(s) + "] = " + std::to_string(k) + " is out of range or repeated");
      }
      seen[static_cast<std::size_t>(k)] = 1;
    }
  }

  std::vector<py::array> inputs, outputs;
  std::vector<PadLeaf> ops;
  py::list result;
  std::size_t idx = 0;
  for (py::handle item : leaves) {
    const py::array a = leaf_array(item, idx);
    if (a.ndim() < 1 || a.shape(0) != rows) {
      throw py::value_error("leaf " + std::to_string(idx) + ": expected " + std::to_string(rows) +
                            " rows (the sum of seq_lens), got shape " + shape_str(a));
    }
    py::array out = with_rows(a, checked_mul(num_seq, max_seq_len, "len(seq_lens) * max_seq_len"));
    checked_mul(row_bytes(a), max_seq_len, "max_seq_len * row bytes");  // one slot, as the kernel sizes it
    ops.push_back(PadLeaf{static_cast<const char*>(a.data()), static_cast<char*>(out.mutable_data()), row_bytes(a)});
    inputs.push_back(a);
    outputs.push_back(out);
    result.append(out);
    ++idx;
  }

  PadJob job;
  job.seq_lens = lens.data();
  job.seq_start = starts.data();
  job.order = order.empty() ? nullptr : order.data();
  job.num_seq = num_seq;
  job.max_len = max_seq_len;
  job.pad_last = pad_last;
  job.leaves = ops.data();
  job.num_leaves = ops.size();
  {
    py::gil_scoped_release release;  // only raw pointers into arrays kept alive above
    run_pad(job);
  }
  return result;
}

py::list gather_rows_py(const py::list& leaves, const py::object& index_obj) {
  const I64Array index = int_array(index_obj, "index");
  const std::int64_t num_index = index.shape(0);
  std::vector<py::array> inputs;
  std::vector<GatherLeaf> ops;
  py::list result;
  std::size_t idx = 0;
  for (py::handle item : leaves) {
    const py::array a = leaf_array(item, idx);
    if (a.ndim() < 1) throw py::value_error("leaf " + std::to_string(idx) + ": expected rows, got a scalar");
    const std::int64_t rows = a.shape(0);
    for (std::int64_t i = 0; i < num_index; ++i) {
      const std::int64_t r = index.data()[i];
      if (r < 0 || r >= rows) {
        throw py::value_error("index[" + std::to_string(i) + "] = " + std::to_string(r) + " is outside [0, " +
                              std::to_string(rows) + ") for leaf " + std::to_string(idx) + " of shape " + shape_str(a));
      }
    }
    py::array out = with_rows(a, num_index);
    ops.push_back(GatherLeaf{static_cast<const char*>(a.data()), static_cast<char*>(out.mutable_data()), row_bytes(a)});
    inputs.push_back(a);
    result.append(out);
    ++idx;
  }
  {
    py::gil_scoped_release release;
    run_gather(ops.data(), ops.size(), index.data(), num_index);
  }
  return result;
}

}  // namespace

void register_sequences(py::module_& m) {
  m.def("seq_lens_from_ids", &seq_lens_from_ids_py, py::arg("episode_ids"), py::arg("agent_indices"),
        py::arg("unroll_ids"), py::arg("max_seq_len"),
        "int32 lengths of consecutive runs of equal (episode, agent, unroll) ids, split every max_seq_len rows.");
  m.def("pad_sequences", &pad_sequences_py, py::arg("leaves"), py::arg("seq_lens"), py::arg("max_seq_len"),
        py::arg("pad_last"), py::arg("order") = py::none(),
        "Pads every leaf's rows into [len(seq_lens) * max_seq_len, ...] blocks (slot s holds sequence order[s]).");
  m.def("gather_rows", &gather_rows_py, py::arg("leaves"), py::arg("index"),
        "Rows leaf[index] of every leaf (bounds-checked), e.g. the initial state of each sequence.");
}

}  // namespace rlblocks::bindings
