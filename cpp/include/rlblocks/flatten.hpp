// Flattening kernel: writes B rows of float32 from a list of pre-validated operations.
//
// The bindings walk the (Python) observations once, validate them and turn them into
// plain operations on raw pointers. Executing those operations is all that happens here,
// with no Python involved, so it runs with the GIL released and is split over rows.
//
//   RowCopy     copy n elements of some numeric type to out[dst ...]   (one env's leaf)
//   RowSet      out[dst] = value                                        (one-hot bit, length)
//   ColumnCopy  for every row r: out[r, col ...] = src[r] (n elements)  (batched leaf)
//   ColumnOneHot for every row r and component j < k, with v = src[r][j]:
//               out[r, col + block[j] + v - start[j]] = 1             (batched one-hot)
//
// Every destination index was bounds-checked against the layout when the op was made; the
// one-hot ops check their index again with the same function (`index_offset`), so an index
// array that another thread changes after validation gives wrong bits, never a write
// outside the leaf.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "rlblocks/simd.hpp"
#include "rlblocks/thread_pool.hpp"

namespace rlblocks {

enum class ElemType : std::uint8_t { F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, Bool };

inline std::int64_t elem_size(ElemType t) {
  switch (t) {
    case ElemType::F64:
    case ElemType::I64:
    case ElemType::U64: return 8;
    case ElemType::F32:
    case ElemType::I32:
    case ElemType::U32: return 4;
    case ElemType::I16:
    case ElemType::U16: return 2;
    default: return 1;
  }
}

// Calls f(T{}) with the C++ type that stores elements of type `t` (bool as uint8_t).
template <class F>
inline void visit_elem_type(ElemType t, F&& f) {
  switch (t) {
    case ElemType::F32: f(float{}); break;
    case ElemType::F64: f(double{}); break;
    case ElemType::I8: f(std::int8_t{}); break;
    case ElemType::I16: f(std::int16_t{}); break;
    case ElemType::I32: f(std::int32_t{}); break;
    case ElemType::I64: f(std::int64_t{}); break;
    case ElemType::U8: f(std::uint8_t{}); break;
    case ElemType::U16: f(std::uint16_t{}); break;
    case ElemType::U32: f(std::uint32_t{}); break;
    case ElemType::U64: f(std::uint64_t{}); break;
    case ElemType::Bool: f(std::uint8_t{}); break;
  }
}

// The offset v - start of an index value v in [start, start + n), or -1 when v is not such
// an integer (NaN, fractional, beyond int64, out of range). Exact for every element type:
// the comparison is made on the integer that is written with, never in float.
// Precondition (checked when a layout is built): start + n - 1 fits in int64. Then the
// wrapped difference (v - start) mod 2**64 is below n exactly when v is in range, so one
// unsigned comparison decides.
template <class T>
inline std::int64_t index_offset(T v, std::int64_t start, std::int64_t n) {
  std::int64_t i;
  if constexpr (std::is_floating_point_v<T>) {
    const double d = static_cast<double>(v);
    // 2**63 is exact in double; NaN fails the first comparison
    if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0) || d != std::trunc(d)) return -1;
    i = static_cast<std::int64_t>(d);
  } else if constexpr (std::is_unsigned_v<T> && sizeof(T) == 8) {
    if (v > static_cast<std::uint64_t>(INT64_MAX)) return -1;
    i = static_cast<std::int64_t>(v);
  } else {
    i = static_cast<std::int64_t>(v);
  }
  const std::uint64_t off = static_cast<std::uint64_t>(i) - static_cast<std::uint64_t>(start);
  return off < static_cast<std::uint64_t>(n) ? static_cast<std::int64_t>(off) : -1;
}

// How a leaf's values are mapped to float32.
enum class ValueMap : std::uint8_t {
  Identity,  // static_cast<float>(x)
  AtariRam,  // (float(x) - 128) / 128, in float32 like numpy's reference
  OneHot,    // element j holds an index: out[dst + block[j] + x_j - start[j]] = 1
};

// The one-hot layout of a leaf: component j's block starts at block[j] and holds the
// values start[j] .. start[j] + nvec[j] - 1.
struct OneHotBlocks {
  const std::int64_t* block = nullptr;
  const std::int64_t* start = nullptr;
  const std::int64_t* nvec = nullptr;
};

struct RowCopy {
  const void* src;
  std::int64_t dst;  // absolute element index into out
  std::int32_t n;
  ElemType type;
  ValueMap map;
  OneHotBlocks blocks{};  // OneHot only
};

struct RowSet {
  std::int64_t dst;  // absolute element index into out
  float value;
};

struct ColumnCopy {
  const char* src;          // row r's n elements start at src + r * row_stride
  std::int64_t row_stride;  // bytes
  std::int64_t col;
  std::int32_t n;
  ElemType type;
  ValueMap map;
};

struct ColumnOneHot {
  const char* src;          // row r's k indices start at src + r * row_stride
  std::int64_t row_stride;  // bytes
  std::int64_t col;
  OneHotBlocks blocks;  // k components
  std::int32_t k;
  ElemType type;  // integer, bool or float holding integral values (validated)
};

struct FlattenJob {
  float* out = nullptr;
  std::int64_t rows = 0;
  std::int64_t row_size = 0;
  bool zero_fill = true;
  // Row ops, sorted by row; row r's ops are [row_start[r], row_start[r + 1]).
  const RowCopy* copies = nullptr;
  const std::int64_t* copy_row_start = nullptr;
  const RowSet* sets = nullptr;
  const std::int64_t* set_row_start = nullptr;
  const ColumnCopy* column_copies = nullptr;
  std::size_t num_column_copies = 0;
  const ColumnOneHot* column_one_hots = nullptr;
  std::size_t num_column_one_hots = 0;
};

namespace detail {

template <class T>
inline void convert(const T* src, float* dst, std::int32_t n, ValueMap map) {
  if (map == ValueMap::AtariRam) {
    for (std::int32_t i = 0; i < n; ++i) dst[i] = (static_cast<float>(src[i]) - 128.0f) / 128.0f;
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    std::memcpy(dst, src, static_cast<std::size_t>(n) * sizeof(float));
  } else {
    for (std::int32_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
  }
}

inline void convert_any(const void* src, ElemType type, float* dst, std::int32_t n, ValueMap map) {
  visit_elem_type(type, [&](auto tag) { convert(static_cast<const decltype(tag)*>(src), dst, n, map); });
}

inline void run_row_copy(const RowCopy& op, float* out) {
  if (op.map != ValueMap::OneHot) {
    convert_any(op.src, op.type, out + op.dst, op.n, op.map);
    return;
  }
  visit_elem_type(op.type, [&](auto tag) {
    const auto* x = static_cast<const decltype(tag)*>(op.src);
    float* base = out + op.dst;
    const OneHotBlocks& b = op.blocks;
    for (std::int32_t j = 0; j < op.n; ++j) {
      const std::int64_t off = index_offset(x[j], b.start[j], b.nvec[j]);
      if (off >= 0) base[b.block[j] + off] = 1.0f;
    }
  });
}

template <class T>
inline void one_hot_rows(const ColumnOneHot& op, float* out, std::int64_t w, std::int64_t r0, std::int64_t r1) {
  for (std::int64_t r = r0; r < r1; ++r) {
    const T* src = reinterpret_cast<const T*>(op.src + r * op.row_stride);
    float* row = out + r * w + op.col;
    const OneHotBlocks& b = op.blocks;
    for (std::int32_t j = 0; j < op.k; ++j) {
      const std::int64_t off = index_offset(src[j], b.start[j], b.nvec[j]);
      if (off >= 0) row[b.block[j] + off] = 1.0f;
    }
  }
}

inline void one_hot_rows_any(const ColumnOneHot& op, float* out, std::int64_t w, std::int64_t r0, std::int64_t r1) {
  visit_elem_type(op.type, [&](auto tag) { one_hot_rows<decltype(tag)>(op, out, w, r0, r1); });
}

#if RLBLOCKS_X86
// Whether every index of an int64 one-hot block is valid (the same test as index_offset:
// (v - start) mod 2**64 < n), four components at a time. Row r starts at src + r * stride.
__attribute__((target("avx2"))) inline bool one_hot_block_valid_avx2(const char* src, std::int64_t stride,
                                                                     std::int64_t rows, std::int64_t k,
                                                                     const OneHotBlocks& b) {
  const __m256i sign = _mm256_set1_epi64x(INT64_MIN);  // unsigned order as signed order
  __m256i ok = _mm256_set1_epi64x(-1);
  for (std::int64_t r = 0; r < rows; ++r) {
    const char* row = src + r * stride;
    std::int64_t j = 0;
    for (; j + 4 <= k; j += 4) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + j * 8));
      const __m256i start = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.start + j));
      const __m256i n = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.nvec + j));
      const __m256i off = _mm256_xor_si256(_mm256_sub_epi64(v, start), sign);
      ok = _mm256_and_si256(ok, _mm256_cmpgt_epi64(_mm256_xor_si256(n, sign), off));
    }
    for (; j < k; ++j) {
      std::int64_t v;
      std::memcpy(&v, row + j * 8, sizeof v);
      if (index_offset(v, b.start[j], b.nvec[j]) < 0) return false;
    }
  }
  return _mm256_movemask_epi8(ok) == -1;
}
#endif

// The first invalid index of a (rows, k) block of one-hot indices of type T (row r at
// src + r * stride) as r * k + j, or -1 when all are valid for `b`. int64 blocks of four
// or more components are checked four at a time first when the CPU has AVX2.
template <class T>
inline std::int64_t first_bad_one_hot(const char* src, std::int64_t stride, std::int64_t rows, std::int64_t k,
                                      const OneHotBlocks& b) {
#if RLBLOCKS_X86
  if constexpr (std::is_same_v<T, std::int64_t>) {
    if (k >= 4 && simd::cpu_has_avx2() && one_hot_block_valid_avx2(src, stride, rows, k, b)) return -1;
  }
#endif
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* row = reinterpret_cast<const T*>(src + r * stride);
    for (std::int64_t j = 0; j < k; ++j) {
      if (index_offset(row[j], b.start[j], b.nvec[j]) < 0) return r * k + j;
    }
  }
  return -1;
}

}  // namespace detail

// Runs rows [r0, r1) of the job.
inline void run_flatten_rows(const FlattenJob& job, std::int64_t r0, std::int64_t r1) {
  float* out = job.out;
  const std::int64_t w = job.row_size;
  if (job.zero_fill) std::memset(out + r0 * w, 0, static_cast<std::size_t>((r1 - r0) * w) * sizeof(float));
  for (std::size_t c = 0; c < job.num_column_copies; ++c) {
    const ColumnCopy& op = job.column_copies[c];
    for (std::int64_t r = r0; r < r1; ++r) {
      detail::convert_any(op.src + r * op.row_stride, op.type, out + r * w + op.col, op.n, op.map);
    }
  }
  for (std::size_t c = 0; c < job.num_column_one_hots; ++c) {
    detail::one_hot_rows_any(job.column_one_hots[c], out, w, r0, r1);
  }
  if (job.copies) {
    for (std::int64_t i = job.copy_row_start[r0]; i < job.copy_row_start[r1]; ++i) {
      detail::run_row_copy(job.copies[i], out);
    }
  }
  if (job.sets) {
    for (std::int64_t i = job.set_row_start[r0]; i < job.set_row_start[r1]; ++i) {
      out[job.sets[i].dst] = job.sets[i].value;
    }
  }
}

// Output bytes per chunk before a job is split over the pool: writing a smaller chunk takes
// about as long as waking a sleeping worker (longer on a busy or virtualised machine), so
// splitting it would only add the wait.
inline constexpr std::int64_t kFlattenChunkBytes = std::int64_t{512} << 10;

// Runs the whole job, split over the pool when rows * row_size is large enough.
inline void run_flatten(const FlattenJob& job) {
  const std::int64_t bytes_per_row = std::max<std::int64_t>(1, job.row_size * 4);
  parallel_for(job.rows, grain_for_bytes(bytes_per_row, kFlattenChunkBytes),
               [&job](std::int64_t r0, std::int64_t r1) { run_flatten_rows(job, r0, r1); });
}

}  // namespace rlblocks
