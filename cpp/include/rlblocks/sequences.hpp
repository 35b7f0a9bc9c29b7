// Sequence chopping and padding for recurrent / attention training batches.
//
//   seq_lens_from_ids   walk rows once; a sequence ends where (episode, agent, unroll) changes
//                       (compared as a tuple, so ids never collide) or at max_len rows.
//   pad_sequences       scatter the rows of every leaf into [num_seq * max_len, ...] blocks,
//                       padding each block with zeros or with copies of its last row; an
//                       optional `order` puts sequence order[s] into slot s (shuffling for free).
//   run_gather          rows at given indices (each sequence's initial state).
//
// Leaves are raw bytes (row_bytes per row), so every fixed-size dtype is handled by the same
// code. The binding validates that seq_lens are non-negative, fit max_len and sum to the rows
// of every leaf, and that `order` is a permutation, before any of this runs.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "rlblocks/thread_pool.hpp"

namespace rlblocks {

// Appends the lengths of consecutive runs of equal ids, runs split every `max_len` rows.
// `agent` and `unroll` may be null (treated as constant).
inline void seq_lens_from_ids(const std::int64_t* eps, const std::int64_t* agent, const std::int64_t* unroll,
                              std::int64_t n, std::int64_t max_len, std::vector<std::int32_t>& out) {
  out.clear();
  if (n <= 0) return;
  std::int64_t start = 0;                   // first row of the current run of equal ids
  auto close_run = [&](std::int64_t end) {  // split [start, end) into chunks of max_len
    std::int64_t len = end - start;
    for (; len > max_len; len -= max_len) out.push_back(static_cast<std::int32_t>(max_len));
    out.push_back(static_cast<std::int32_t>(len));
    start = end;
  };
  for (std::int64_t i = 1; i < n; ++i) {
    // Non-short-circuit tests keep this loop branch-light; runs are long on average.
    const bool changed = (eps[i] != eps[i - 1]) | (agent != nullptr && agent[i] != agent[i - 1]) |
                         (unroll != nullptr && unroll[i] != unroll[i - 1]);
    if (changed) close_run(i);
  }
  close_run(n);
}

struct PadLeaf {
  const char* src;         // rows * row_bytes, C-contiguous
  char* dst;               // num_seq * max_len * row_bytes, C-contiguous
  std::int64_t row_bytes;  // bytes per row (product of trailing dims * itemsize)
};

struct PadJob {
  const std::int32_t* seq_lens = nullptr;   // num_seq lengths, each in [0, max_len]
  const std::int64_t* seq_start = nullptr;  // num_seq first-row indices (prefix sums)
  const std::int64_t* order = nullptr;      // slot -> sequence; null = identity
  std::int64_t num_seq = 0;
  std::int64_t max_len = 0;
  bool pad_last = false;  // repeat the last row instead of zero padding (empty sequences: zeros)
  const PadLeaf* leaves = nullptr;
  std::size_t num_leaves = 0;
};

// Fills output slots [s0, s1) of every leaf.
inline void run_pad_slots(const PadJob& job, std::int64_t s0, std::int64_t s1) {
  for (std::size_t l = 0; l < job.num_leaves; ++l) {
    const PadLeaf& leaf = job.leaves[l];
    const std::int64_t rb = leaf.row_bytes;
    if (rb == 0) continue;
    for (std::int64_t s = s0; s < s1; ++s) {
      const std::int64_t k = job.order ? job.order[s] : s;
      const std::int64_t len = job.seq_lens[k];
      const char* src = leaf.src + job.seq_start[k] * rb;
      char* dst = leaf.dst + s * job.max_len * rb;
      if (len > 0) std::memcpy(dst, src, static_cast<std::size_t>(len * rb));
      const std::int64_t pad = job.max_len - len;
      if (pad <= 0) continue;
      char* tail = dst + len * rb;
      if (job.pad_last && len > 0) {
        const char* last = src + (len - 1) * rb;
        for (std::int64_t t = 0; t < pad; ++t) std::memcpy(tail + t * rb, last, static_cast<std::size_t>(rb));
      } else {
        std::memset(tail, 0, static_cast<std::size_t>(pad * rb));
      }
    }
  }
}

inline void run_pad(const PadJob& job) {
  std::int64_t slot_bytes = 0;
  for (std::size_t l = 0; l < job.num_leaves; ++l) slot_bytes += job.leaves[l].row_bytes * job.max_len;
  parallel_for(job.num_seq, grain_for_bytes(slot_bytes),
               [&job](std::int64_t s0, std::int64_t s1) { run_pad_slots(job, s0, s1); });
}

inline void prefetch(const void* p) {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(p);
#else
  (void)p;
#endif
}

struct GatherLeaf {
  const char* src;  // C-contiguous rows
  char* dst;        // num_index rows
  std::int64_t row_bytes;
};

// dst[i] = src[index[i]] for every leaf (indices validated by the caller).
inline void run_gather(const GatherLeaf* leaves, std::size_t num_leaves, const std::int64_t* index,
                       std::int64_t num_index) {
  std::int64_t row_bytes = 0;
  for (std::size_t l = 0; l < num_leaves; ++l) row_bytes += leaves[l].row_bytes;
  parallel_for(num_index, grain_for_bytes(row_bytes), [&](std::int64_t i0, std::int64_t i1) {
    for (std::size_t l = 0; l < num_leaves; ++l) {
      const GatherLeaf& g = leaves[l];
      const auto rb = static_cast<std::size_t>(g.row_bytes);
      if (rb == 0) continue;
      constexpr std::int64_t kAhead = 8;  // rows are scattered: hide the memory latency
      for (std::int64_t i = i0; i < i1; ++i) {
        if (i + kAhead < i1) {
          const char* next = g.src + index[i + kAhead] * g.row_bytes;
          for (std::int64_t off = 0; off < g.row_bytes; off += 64) prefetch(next + off);
        }
        std::memcpy(g.dst + i * g.row_bytes, g.src + index[i] * g.row_bytes, rb);
      }
    }
  });
}

}  // namespace rlblocks
