// INTER_AREA resize of batched frames (image_frames.hpp's FrameBatch), optionally fused with
// the grayscale conversion and with the max of two frames (MaxAndSkip's flicker removal).
//
// Semantics (the numpy twins in rlblocks/_reference/image.py compute exactly the same
// integers / floats; OpenCV is within +-1):
//
// * Resize follows cv2.resize(INTER_AREA). When neither axis is enlarged it is a separable
//   box filter whose per-output source ranges and fractional weights are OpenCV's; when an
//   axis is enlarged OpenCV switches both axes to its "area" flavour of bilinear taps, and
//   so do we. Taps are computed in double exactly like OpenCV, then:
//     - uint8: each axis' weights are quantised to 14 bits (summing to exactly 16384 per
//       output). Vertical pass first: v = (sum_k wy_k * row_k + 2^6) >> 7, an int16 row
//       (<= 32640); horizontal pass: (sum_k wx_k * v_k + 2^20) >> 21.
//     - gray+resize (uint8 RGB): OpenCV's luminance coefficients (9798, 19235, 3735)/2^15
//       are folded into the horizontal weights, cw = round(wx * coef / 2), re-quantised to
//       sum to 16384; the colour rows are filtered vertically as above and the horizontal
//       pass sums all three channels at once. There is no intermediate gray rounding, so the
//       result is within +-1 of cvtColor followed by resize (whose gray rounding errors are
//       averaged by the filter).
//     - float32: weights stay double, the vertical pass accumulates taps in order, then the
//       horizontal pass, then one rounding to float32.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

#include "rlblocks/image_frames.hpp"
#include "rlblocks/simd.hpp"
#include "rlblocks/thread_pool.hpp"

namespace rlblocks {
namespace image {

constexpr int kWeightBits = 14;
constexpr std::int32_t kWeightOne = 1 << kWeightBits;
constexpr int kVerticalShift = 7;                              // int16 rows after the vertical pass
constexpr int kFinalShift = 2 * kWeightBits - kVerticalShift;  // 21

// Source taps of one axis: output o reads inputs start[o] .. start[o] + taps - 1 with
// weights w*[o * taps + k] (zero-padded, so every output has the same tap count).
struct AxisTaps {
  std::int64_t n_in = 0, n_out = 0;
  std::int64_t taps = 0;
  std::vector<std::int64_t> start;
  std::vector<double> wd;        // exact weights (float path)
  std::vector<std::int32_t> wq;  // 14-bit weights, summing to 16384 per output (uint8 path)
  // Gray weights: output o reads the 3 * taps colour values from 3 * start[o] with weights
  // wg[o * gray_stride + j] (14-bit, summing to 16384; zero-padded to gray_stride >= 16).
  std::int64_t gray_stride = 0;
  std::vector<std::int16_t> wg;
};

namespace detail {

struct RawTap {
  std::int64_t index;
  double weight;
};

// OpenCV's INTER_AREA taps for one axis when the image is not enlarged on either axis.
// OpenCV derives the scale as 1 / (n_out / n_in), which is not always n_in / n_out in
// double; exact boundaries (d * scale integral) depend on it, so we do the same.
inline double opencv_scale(std::int64_t n_in, std::int64_t n_out) {
  return 1.0 / (static_cast<double>(n_out) / static_cast<double>(n_in));
}

inline std::vector<std::vector<RawTap>> area_taps(std::int64_t n_in, std::int64_t n_out) {
  const double scale = opencv_scale(n_in, n_out);
  std::vector<std::vector<RawTap>> res(static_cast<std::size_t>(n_out));
  for (std::int64_t d = 0; d < n_out; ++d) {
    const double fs1 = static_cast<double>(d) * scale;
    const double fs2 = fs1 + scale;
    std::int64_t s1 = static_cast<std::int64_t>(std::ceil(fs1));
    std::int64_t s2 = static_cast<std::int64_t>(std::floor(fs2));
    s2 = std::min(s2, n_in - 1);
    s1 = std::min(s1, s2);
    const double cell = std::min(scale, static_cast<double>(n_in) - fs1);
    auto& t = res[static_cast<std::size_t>(d)];
    if (static_cast<double>(s1) - fs1 > 1e-3) t.push_back({s1 - 1, (static_cast<double>(s1) - fs1) / cell});
    for (std::int64_t s = s1; s < s2; ++s) t.push_back({s, 1.0 / cell});
    if (fs2 - static_cast<double>(s2) > 1e-3) {
      t.push_back({s2, std::min(std::min(fs2 - static_cast<double>(s2), 1.0), cell) / cell});
    }
  }
  return res;
}

// OpenCV's INTER_AREA taps for one axis when the image is enlarged on some axis: bilinear
// with the "area" phase, the fraction stored as float like OpenCV does.
inline std::vector<std::vector<RawTap>> area_linear_taps(std::int64_t n_in, std::int64_t n_out) {
  const double scale = opencv_scale(n_in, n_out);
  const double inv_scale = static_cast<double>(n_out) / static_cast<double>(n_in);
  std::vector<std::vector<RawTap>> res(static_cast<std::size_t>(n_out));
  for (std::int64_t d = 0; d < n_out; ++d) {
    std::int64_t s = static_cast<std::int64_t>(std::floor(static_cast<double>(d) * scale));
    double f =
        static_cast<double>(static_cast<float>(static_cast<double>(d + 1) - static_cast<double>(s + 1) * inv_scale));
    f = f <= 0.0 ? 0.0 : f - std::floor(f);
    if (s < 0) {
      f = 0.0;
      s = 0;
    }
    if (s >= n_in - 1) {
      f = 0.0;
      s = n_in - 1;
    }
    auto& t = res[static_cast<std::size_t>(d)];
    if (f == 0.0) {
      t.push_back({s, 1.0});
    } else {
      t.push_back({s, 1.0 - f});
      t.push_back({s + 1, f});
    }
  }
  return res;
}

// Rounds scaled weights to integers and gives the rounding error to the first largest one,
// so every output's integer weights sum to exactly `one` (flat regions stay exact).
template <class Int>
inline void quantise(const std::vector<std::pair<std::size_t, double>>& scaled, std::int64_t one, Int* dst) {
  std::int64_t total = 0;
  std::size_t biggest = scaled.front().first;
  std::int64_t biggest_q = -1;
  for (const auto& [slot, x] : scaled) {
    const auto q = static_cast<std::int64_t>(std::floor(x + 0.5));
    dst[slot] = static_cast<Int>(q);
    total += q;
    if (q > biggest_q) {
      biggest_q = q;
      biggest = slot;
    }
  }
  dst[biggest] = static_cast<Int>(biggest_q + (one - total));
}

inline AxisTaps make_axis_taps(std::int64_t n_in, std::int64_t n_out, bool enlarge) {
  static constexpr double kCoef[3] = {static_cast<double>(kGrayR), static_cast<double>(kGrayG),
                                      static_cast<double>(kGrayB)};
  const auto raw = enlarge ? area_linear_taps(n_in, n_out) : area_taps(n_in, n_out);
  AxisTaps a;
  a.n_in = n_in;
  a.n_out = n_out;
  for (const auto& t : raw) a.taps = std::max<std::int64_t>(a.taps, static_cast<std::int64_t>(t.size()));
  const std::size_t k = static_cast<std::size_t>(a.taps);
  a.gray_stride = std::max<std::int64_t>(16, 3 * a.taps);
  const std::size_t gs = static_cast<std::size_t>(a.gray_stride);
  a.start.assign(static_cast<std::size_t>(n_out), 0);
  a.wd.assign(static_cast<std::size_t>(n_out) * k, 0.0);
  a.wq.assign(static_cast<std::size_t>(n_out) * k, 0);
  a.wg.assign(static_cast<std::size_t>(n_out) * gs, 0);
  std::vector<std::pair<std::size_t, double>> scaled, scaled_gray;
  for (std::size_t o = 0; o < raw.size(); ++o) {
    const auto& t = raw[o];
    // Shift windows that would run past the end back inside; the weights move with them.
    const std::int64_t start = std::min(t.front().index, n_in - a.taps);
    a.start[o] = start;
    scaled.clear();
    scaled_gray.clear();
    for (const auto& tap : t) {
      const auto j = static_cast<std::size_t>(tap.index - start);
      a.wd[o * k + j] = tap.weight;
      scaled.emplace_back(j, tap.weight * kWeightOne);
      // weight * coef / 2^15 * 2^14
      for (std::size_t c = 0; c < 3; ++c) scaled_gray.emplace_back(3 * j + c, (tap.weight * kCoef[c]) * 0.5);
    }
    quantise(scaled, kWeightOne, a.wq.data() + o * k);
    quantise(scaled_gray, kWeightOne, a.wg.data() + o * gs);
  }
  return a;
}

}  // namespace detail

// Taps of one axis, computed once per (n_in, n_out, enlarge) and cached for the process.
inline std::shared_ptr<const AxisTaps> axis_taps(std::int64_t n_in, std::int64_t n_out, bool enlarge) {
  static std::mutex mu;
  static std::map<std::tuple<std::int64_t, std::int64_t, bool>, std::shared_ptr<const AxisTaps>> cache;
  std::lock_guard<std::mutex> lk(mu);
  auto key = std::make_tuple(n_in, n_out, enlarge);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  auto taps = std::make_shared<const AxisTaps>(detail::make_axis_taps(n_in, n_out, enlarge));
  if (cache.size() > 256) cache.clear();  // bounded: odd sizes never pile up
  cache.emplace(key, taps);
  return taps;
}

// The tap tables of a (h_in, w_in) -> (h_out, w_out) resize. OpenCV enlarges with its
// bilinear flavour on BOTH axes as soon as either axis grows.
struct ResizePlan {
  std::shared_ptr<const AxisTaps> y, x;
};

inline ResizePlan resize_plan(std::int64_t h_in, std::int64_t w_in, std::int64_t h_out, std::int64_t w_out) {
  const bool enlarge = h_out > h_in || w_out > w_in;
  return ResizePlan{axis_taps(h_in, h_out, enlarge), axis_taps(w_in, w_out, enlarge)};
}

namespace detail {

// v[j] = (sum_t w[t] * rows[t][j] + 2^6) >> 7 for j0 <= j < n (acc: n int32 of scratch).
// With rows2 (may be null) every pixel is max(rows[t][j], rows2[t][j]) first.
inline void vertical_scalar(const std::uint8_t* const* rows, const std::uint8_t* const* rows2, const std::int32_t* w,
                            std::int64_t taps, std::int64_t j0, std::int64_t n, std::int32_t* acc, std::int16_t* v) {
  for (std::int64_t j = j0; j < n; ++j) acc[j] = 1 << (kVerticalShift - 1);
  for (std::int64_t t = 0; t < taps; ++t) {
    const std::int32_t wt = w[t];
    const std::uint8_t* row = rows[t];
    if (rows2 != nullptr) {
      const std::uint8_t* row2 = rows2[t];
      for (std::int64_t j = j0; j < n; ++j) acc[j] += wt * static_cast<std::int32_t>(std::max(row[j], row2[j]));
    } else {
      for (std::int64_t j = j0; j < n; ++j) {
        acc[j] += static_cast<std::int32_t>(static_cast<std::int16_t>(wt)) * static_cast<std::int16_t>(row[j]);
      }
    }
  }
  for (std::int64_t j = j0; j < n; ++j) v[j] = static_cast<std::int16_t>(acc[j] >> kVerticalShift);
}

// Gray: out[o] = (sum_j wg[o][j] * v[3 start[o] + j] + 2^20) >> 21.
inline void horizontal_gray_scalar(const std::int16_t* v, const AxisTaps& tx, std::int64_t o0, std::uint8_t* out) {
  const std::int64_t n = 3 * tx.taps;
  for (std::int64_t o = o0; o < tx.n_out; ++o) {
    const std::int16_t* w = tx.wg.data() + o * tx.gray_stride;
    const std::int16_t* src = v + 3 * tx.start[static_cast<std::size_t>(o)];
    std::int32_t acc = 1 << (kFinalShift - 1);
    for (std::int64_t j = 0; j < n; ++j) acc += static_cast<std::int32_t>(w[j]) * src[j];
    out[o] = static_cast<std::uint8_t>(acc >> kFinalShift);
  }
}

// Colour: out[o, c] = (sum_t wq[o][t] * v[(start[o] + t) * C + c] + 2^20) >> 21.
inline void horizontal_colour(const std::int16_t* v, const AxisTaps& tx, std::int64_t channels, std::uint8_t* out) {
  const std::int64_t k = tx.taps;
  for (std::int64_t o = 0; o < tx.n_out; ++o) {
    const std::int32_t* w = tx.wq.data() + o * k;
    const std::int16_t* src = v + tx.start[static_cast<std::size_t>(o)] * channels;
    for (std::int64_t c = 0; c < channels; ++c) {
      std::int32_t acc = 1 << (kFinalShift - 1);
      for (std::int64_t t = 0; t < k; ++t) acc += w[t] * src[t * channels + c];
      out[o * channels + c] = static_cast<std::uint8_t>(acc >> kFinalShift);
    }
  }
}

#if RLBLOCKS_X86
// AVX2 versions (selected at run time); they compute the same integers as the scalar code.
__attribute__((target("avx2"))) inline __m128i load_max(const std::uint8_t* const* rows,
                                                        const std::uint8_t* const* rows2, std::int64_t t,
                                                        std::int64_t j) {
  const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[t] + j));
  if (rows2 == nullptr) return a;
  return _mm_max_epu8(a, _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows2[t] + j)));
}

__attribute__((target("avx2"))) inline std::int64_t vertical_avx2(const std::uint8_t* const* rows,
                                                                  const std::uint8_t* const* rows2,
                                                                  const std::int32_t* w, std::int64_t taps,
                                                                  std::int64_t n, std::int16_t* v,
                                                                  std::int64_t j0 = 0) {
  const __m256i round = _mm256_set1_epi32(1 << (kVerticalShift - 1));
  std::int64_t j = j0;
  for (; j + 16 <= n; j += 16) {
    __m256i lo = round, hi = round;
    for (std::int64_t t = 0; t < taps; t += 2) {
      const bool pair = t + 1 < taps;
      const __m256i a = _mm256_cvtepu8_epi16(load_max(rows, rows2, t, j));
      const __m256i b = pair ? _mm256_cvtepu8_epi16(load_max(rows, rows2, t + 1, j)) : _mm256_setzero_si256();
      const __m256i ww = _mm256_set1_epi32(static_cast<std::int32_t>(
          (static_cast<std::uint32_t>(pair ? w[t + 1] : 0) << 16) | static_cast<std::uint32_t>(w[t])));
      lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_unpacklo_epi16(a, b), ww));
      hi = _mm256_add_epi32(hi, _mm256_madd_epi16(_mm256_unpackhi_epi16(a, b), ww));
    }
    lo = _mm256_srai_epi32(lo, kVerticalShift);
    hi = _mm256_srai_epi32(hi, kVerticalShift);
    // unpack/pack both work inside 128-bit lanes, so packing restores the element order.
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(v + j), _mm256_packs_epi32(lo, hi));
  }
  return j;
}

// The same vertical pass, 32 values per iteration (AVX-512BW; unpack/pack stay inside
// 128-bit lanes as in the AVX2 version, so the element order is restored the same way).
__attribute__((target("avx512f,avx512bw"))) inline std::int64_t vertical_avx512(const std::uint8_t* const* rows,
                                                                                const std::uint8_t* const* rows2,
                                                                                const std::int32_t* w,
                                                                                std::int64_t taps, std::int64_t n,
                                                                                std::int16_t* v) {
  const __m512i round = _mm512_set1_epi32(1 << (kVerticalShift - 1));
  std::int64_t j = 0;
  for (; j + 32 <= n; j += 32) {
    __m512i lo = round, hi = round;
    for (std::int64_t t = 0; t < taps; t += 2) {
      const bool pair = t + 1 < taps;
      __m256i a8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[t] + j));
      if (rows2 != nullptr)
        a8 = _mm256_max_epu8(a8, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows2[t] + j)));
      const __m512i a = _mm512_cvtepu8_epi16(a8);
      __m512i b = _mm512_setzero_si512();
      if (pair) {
        __m256i b8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[t + 1] + j));
        if (rows2 != nullptr) {
          b8 = _mm256_max_epu8(b8, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows2[t + 1] + j)));
        }
        b = _mm512_cvtepu8_epi16(b8);
      }
      const __m512i ww = _mm512_set1_epi32(static_cast<std::int32_t>(
          (static_cast<std::uint32_t>(pair ? w[t + 1] : 0) << 16) | static_cast<std::uint32_t>(w[t])));
      lo = _mm512_add_epi32(lo, _mm512_madd_epi16(_mm512_unpacklo_epi16(a, b), ww));
      hi = _mm512_add_epi32(hi, _mm512_madd_epi16(_mm512_unpackhi_epi16(a, b), ww));
    }
    lo = _mm512_srai_epi32(lo, kVerticalShift);
    hi = _mm512_srai_epi32(hi, kVerticalShift);
    _mm512_storeu_si512(reinterpret_cast<void*>(v + j), _mm512_packs_epi32(lo, hi));
  }
  return j;
}

// Gray horizontal pass, 8 outputs at a time; needs 3 * taps <= 16 and v readable 16 past
// each window start. Returns the first output it did not write.
__attribute__((target("avx2"))) inline std::int64_t horizontal_gray_avx2(const std::int16_t* v, const AxisTaps& tx,
                                                                         std::uint8_t* out) {
  const __m256i round = _mm256_set1_epi32(1 << (kFinalShift - 1));
  const std::int16_t* wg = tx.wg.data();
  const std::int64_t gs = tx.gray_stride;
  const std::int64_t* start = tx.start.data();
  std::int64_t o = 0;
  for (; o + 8 <= tx.n_out; o += 8) {
    __m256i r[8];
    for (int i = 0; i < 8; ++i) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + 3 * start[o + i]));
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wg + (o + i) * gs));
      r[i] = _mm256_madd_epi16(x, w);
    }
    const __m256i s01 = _mm256_hadd_epi32(r[0], r[1]), s23 = _mm256_hadd_epi32(r[2], r[3]);
    const __m256i s45 = _mm256_hadd_epi32(r[4], r[5]), s67 = _mm256_hadd_epi32(r[6], r[7]);
    const __m256i s0123 = _mm256_hadd_epi32(s01, s23), s4567 = _mm256_hadd_epi32(s45, s67);
    __m256i sum =
        _mm256_add_epi32(_mm256_permute2x128_si256(s0123, s4567, 0x20), _mm256_permute2x128_si256(s0123, s4567, 0x31));
    sum = _mm256_srai_epi32(_mm256_add_epi32(sum, round), kFinalShift);
    const __m128i w16 = _mm_packs_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + o), _mm_packus_epi16(w16, w16));
  }
  return o;
}

#endif

// Whether the AVX2 paths may run (tests switch it off to check the scalar paths agree).
inline std::atomic<bool>& simd_allowed() {
  static std::atomic<bool> allowed{true};
  return allowed;
}

inline bool use_avx2() {
#if RLBLOCKS_X86
  return simd::cpu_has_avx2() && simd_allowed().load(std::memory_order_relaxed);
#else
  return false;
#endif
}

// Scratch for one worker: the int16 row of the vertical pass (+16 readable padding).
struct U8Scratch {
  std::vector<std::int16_t> v;
  std::vector<std::int32_t> acc;
  std::vector<const std::uint8_t*> rows, rows2;
};

// One frame, uint8 -> uint8. gray: input RGB, output 1 channel. second (may be null): a
// batch of the same shape whose frame b is max-pooled with src's before filtering.
inline void resize_frame_u8(const FrameBatch<std::uint8_t>& src, std::int64_t b, const ResizePlan& plan, bool gray,
                            std::uint8_t* out, U8Scratch& s, const FrameBatch<std::uint8_t>* second = nullptr) {
  const AxisTaps& ty = *plan.y;
  const AxisTaps& tx = *plan.x;
  const std::int64_t cout = gray ? 1 : src.channels;
  const std::int64_t row_len = src.width * src.channels;
  const std::int64_t ky = ty.taps;
  s.v.assign(static_cast<std::size_t>(row_len + 16), 0);
  s.acc.resize(static_cast<std::size_t>(row_len));
  s.rows.resize(static_cast<std::size_t>(ky));
  s.rows2.resize(static_cast<std::size_t>(ky));
  const std::uint8_t* const* rows2 = second != nullptr ? s.rows2.data() : nullptr;
  const bool avx2 = use_avx2();
#if RLBLOCKS_X86
  const bool avx512 = avx2 && simd::cpu_has_avx512bw();
#endif
  const bool gray_avx2 = avx2 && gray && 3 * tx.taps <= 16;
  for (std::int64_t oy = 0; oy < ty.n_out; ++oy) {
    const std::int64_t y0 = ty.start[static_cast<std::size_t>(oy)];
    const std::int32_t* wy = ty.wq.data() + oy * ky;
    for (std::int64_t t = 0; t < ky; ++t) {
      s.rows[static_cast<std::size_t>(t)] = src.row(b, y0 + t);
      if (second != nullptr) s.rows2[static_cast<std::size_t>(t)] = second->row(b, y0 + t);
    }
    std::int64_t j = 0;
#if RLBLOCKS_X86
    if (avx512) j = vertical_avx512(s.rows.data(), rows2, wy, ky, row_len, s.v.data());
    if (avx2) j = vertical_avx2(s.rows.data(), rows2, wy, ky, row_len, s.v.data(), j);
#endif
    vertical_scalar(s.rows.data(), rows2, wy, ky, j, row_len, s.acc.data(), s.v.data());
    std::uint8_t* orow = out + oy * tx.n_out * cout;
    if (gray) {
      std::int64_t o = 0;
#if RLBLOCKS_X86
      if (gray_avx2) o = horizontal_gray_avx2(s.v.data(), tx, orow);
#endif
      horizontal_gray_scalar(s.v.data(), tx, o, orow);
    } else {
      horizontal_colour(s.v.data(), tx, cout, orow);
    }
  }
}

// One frame, float32 -> float32 (double accumulation, taps in order, one rounding).
inline void resize_frame_f32(const FrameBatch<float>& src, std::int64_t b, const ResizePlan& plan, float* out,
                             std::vector<double>& acc) {
  const AxisTaps& ty = *plan.y;
  const AxisTaps& tx = *plan.x;
  const std::int64_t c = src.channels;
  const std::int64_t row_len = src.width * c;
  const std::int64_t ky = ty.taps, kx = tx.taps;
  acc.resize(static_cast<std::size_t>(row_len));
  for (std::int64_t oy = 0; oy < ty.n_out; ++oy) {
    std::fill(acc.begin(), acc.end(), 0.0);
    const std::int64_t y0 = ty.start[static_cast<std::size_t>(oy)];
    const double* wy = ty.wd.data() + oy * ky;
    for (std::int64_t t = 0; t < ky; ++t) {
      if (wy[t] == 0.0) continue;
      const float* row = src.row(b, y0 + t);
      const double w = wy[t];
      for (std::int64_t j = 0; j < row_len; ++j) acc[static_cast<std::size_t>(j)] += w * static_cast<double>(row[j]);
    }
    float* orow = out + oy * tx.n_out * c;
    for (std::int64_t o = 0; o < tx.n_out; ++o) {
      const double* wx = tx.wd.data() + o * kx;
      const double* a = acc.data() + tx.start[static_cast<std::size_t>(o)] * c;
      for (std::int64_t ch = 0; ch < c; ++ch) {
        double v = 0.0;
        for (std::int64_t t = 0; t < kx; ++t) v += wx[t] * a[t * c + ch];
        orow[o * c + ch] = static_cast<float>(v);
      }
    }
  }
}

}  // namespace detail

// out: contiguous (B, h_out, w_out, gray ? 1 : C). second (may be null): same-shape frames
// max-pooled with src's before filtering (MaxAndSkip's flicker removal, fused).
inline void resize_u8(const FrameBatch<std::uint8_t>& src, std::int64_t h_out, std::int64_t w_out, bool gray,
                      std::uint8_t* out, const FrameBatch<std::uint8_t>* second = nullptr) {
  const ResizePlan plan = resize_plan(src.height, src.width, h_out, w_out);
  const std::int64_t out_frame = h_out * w_out * (gray ? 1 : src.channels);
  parallel_for(src.batch, frame_grain(src.height * src.width * src.channels), [&](std::int64_t b0, std::int64_t b1) {
    detail::U8Scratch s;
    for (std::int64_t b = b0; b < b1; ++b) {
      detail::resize_frame_u8(src, b, plan, gray, out + b * out_frame, s, second);
    }
  });
}

// out: contiguous (B, h_out, w_out, C).
inline void resize_f32(const FrameBatch<float>& src, std::int64_t h_out, std::int64_t w_out, float* out) {
  const ResizePlan plan = resize_plan(src.height, src.width, h_out, w_out);
  const std::int64_t out_frame = h_out * w_out * src.channels;
  parallel_for(src.batch, frame_grain(src.height * src.width * src.channels * 4),
               [&](std::int64_t b0, std::int64_t b1) {
                 std::vector<double> acc;
                 for (std::int64_t b = b0; b < b1; ++b)
                   detail::resize_frame_f32(src, b, plan, out + b * out_frame, acc);
               });
}

}  // namespace image
}  // namespace rlblocks
