// Running what a flatten walk collected: the ops become a FlattenJob for the GIL-free
// kernel (row-tagged ops bucketed by row first), and inputs that share memory with the
// output are copied before it is written.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "flatten_read.hpp"
#include "rlblocks/checked.hpp"
#include "rlblocks/flatten.hpp"

namespace rlblocks::bindings::flatten_read {

// Byte range [lo, hi) read by `rows` runs of `bytes` bytes, run r at src + r * stride.
inline std::pair<std::uintptr_t, std::uintptr_t> read_range(const void* src, std::int64_t stride, std::int64_t rows,
                                                            std::int64_t bytes) {
  auto lo = reinterpret_cast<std::uintptr_t>(src);
  auto hi = lo + static_cast<std::uintptr_t>(bytes);
  if (rows > 1) {
    const auto span = static_cast<std::uintptr_t>(stride) * static_cast<std::uintptr_t>(rows - 1);
    if (stride >= 0) hi += span;
    else lo += span;  // wraps to lo - |stride| * (rows - 1)
  }
  return {lo, hi};
}

// The collected ops read their inputs while the kernel writes the output: an input that
// shares memory with the output (a leaf that is a view of `out=`) would be read after it
// was zero-filled or overwritten. Every such input is copied first, so the result equals
// the one from a separate output (the numpy reference builds the rows before writing).
inline void detach_aliased_sources(Collector& c, float* out, std::int64_t batch, std::int64_t row_size) {
  const auto out_lo = reinterpret_cast<std::uintptr_t>(out);
  const auto out_hi =
      out_lo + static_cast<std::uintptr_t>(checked_mul(checked_mul(batch, row_size, "transform_batch: batch * size"), 4,
                                                       "transform_batch: output bytes"));
  if (out_lo == out_hi) return;
  // Rebases `src` into a private copy of [lo, hi) when that range meets the output.
  auto detach = [&](const void* src, std::pair<std::uintptr_t, std::uintptr_t> range) -> const char* {
    const auto [lo, hi] = range;
    if (!(lo < out_hi && out_lo < hi)) return static_cast<const char*>(src);
    const std::size_t pad = lo % 16;  // keep the alignment of every element
    py::array_t<std::uint8_t> copy(static_cast<py::ssize_t>(hi - lo + pad));
    char* base = reinterpret_cast<char*>(copy.mutable_data()) + pad;
    std::memcpy(base, reinterpret_cast<const void*>(lo), hi - lo);
    c.keepalive.push_back(copy);
    return base + (reinterpret_cast<std::uintptr_t>(src) - lo);
  };
  for (RowCopy& op : c.copies) {
    op.src = detach(op.src, read_range(op.src, 0, 1, std::int64_t{op.n} * elem_size(op.type)));
  }
  for (ColumnCopy& op : c.column_copies) {
    op.src = detach(op.src, read_range(op.src, op.row_stride, batch, std::int64_t{op.n} * elem_size(op.type)));
  }
  for (ColumnOneHot& op : c.column_one_hots) {
    op.src = detach(op.src, read_range(op.src, op.row_stride, batch, std::int64_t{op.k} * elem_size(op.type)));
  }
}

// Counting sort of row-tagged ops into row buckets.
template <class Op>
inline void bucket_by_row(const std::vector<Op>& ops, const std::vector<std::int64_t>& rows, std::int64_t batch,
                          std::vector<Op>& sorted_ops, std::vector<std::int64_t>& start) {
  start.assign(static_cast<std::size_t>(batch + 1), 0);
  for (auto r : rows) ++start[static_cast<std::size_t>(r + 1)];
  for (std::size_t r = 0; r < static_cast<std::size_t>(batch); ++r) start[r + 1] += start[r];
  sorted_ops.resize(ops.size());
  std::vector<std::int64_t> fill(start.begin(), start.end() - 1);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    sorted_ops[static_cast<std::size_t>(fill[static_cast<std::size_t>(rows[i])]++)] = ops[i];
  }
}

inline void execute(Collector& c, float* out, std::int64_t batch, std::int64_t row_size, bool zero_fill) {
  FlattenJob job;
  job.out = out;
  job.rows = batch;
  job.row_size = row_size;
  job.zero_fill = zero_fill;
  if (c.tag_rows) {
    bucket_by_row(c.copies, c.copy_rows, batch, c.sorted_copies, c.copy_row_start);
    bucket_by_row(c.sets, c.set_rows, batch, c.sorted_sets, c.set_row_start);
    job.copies = c.sorted_copies.data();
    job.sets = c.sorted_sets.data();
  } else {
    job.copies = c.copies.data();
    job.sets = c.sets.data();
  }
  if (!c.copies.empty()) job.copy_row_start = c.copy_row_start.data();
  else job.copies = nullptr;
  if (!c.sets.empty()) job.set_row_start = c.set_row_start.data();
  else job.sets = nullptr;
  job.column_copies = c.column_copies.data();
  job.num_column_copies = c.column_copies.size();
  job.column_one_hots = c.column_one_hots.data();
  job.num_column_one_hots = c.column_one_hots.size();
  if (checked_mul(batch, row_size, "transform_batch: batch * size") >= 4096) {
    py::gil_scoped_release release;  // the ops hold raw pointers only
    run_flatten(job);
  } else {
    run_flatten(job);
  }
}

}  // namespace rlblocks::bindings::flatten_read
