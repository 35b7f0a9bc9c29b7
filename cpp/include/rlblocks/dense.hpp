// A stack of dense layers over a small float32 batch, in one call: for every layer
// y = act(x W^T + b), W row-major [out, in] (torch's nn.Linear layout), act linear, tanh
// (activations.hpp's kernel, the one the numpy path calls) or ReLU. A policy's forward at a
// rollout's batch of a few rows costs numpy three dispatches per layer (matmul, bias,
// activation), more than the arithmetic; here each output is one dot product of two
// contiguous rows (8 lanes and 8 outputs at a time with AVX2 + FMA, chosen at run time; a
// plain loop elsewhere), so
// the values agree with numpy's BLAS to float32 rounding (the sums' order differs).
// No BLAS: at large batches the numpy path (sgemm) is the faster one.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "rlblocks/activations.hpp"
#include "rlblocks/simd.hpp"

namespace rlblocks {

enum class DenseActivation : int { kLinear = 0, kTanh = 1, kRelu = 2 };

struct DenseLayer {
  const float* weight;  // [out, in], row-major
  const float* bias;    // [out]
  std::int64_t in, out;
  DenseActivation activation;
};

namespace detail {

inline float dot_portable(const float* a, const float* b, std::int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  }
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// y[r, o] = x[r, :] . w[o, :] + b[o] for every row and output (no activation).
inline void dense_affine_portable(const float* x, std::int64_t rows, const DenseLayer& layer, float* y) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * layer.in;
    for (std::int64_t o = 0; o < layer.out; ++o) {
      y[r * layer.out + o] = dot_portable(xr, layer.weight + o * layer.in, layer.in) + layer.bias[o];
    }
  }
}

#if RLBLOCKS_X86
__attribute__((target("avx2,fma"))) inline float hsum8(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

// The sums of 8 vectors' lanes: {sum(v[0]), ..., sum(v[7])}.
__attribute__((target("avx2,fma"))) inline __m256 hsum8x8(const __m256* v) {
  const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
  const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// As dense_affine_portable: eight outputs per pass over an input row, the last partial
// block of 8 inputs through a masked load.
__attribute__((target("avx2,fma"))) inline void dense_affine_avx2(const float* x, std::int64_t rows,
                                                                  const DenseLayer& layer, float* y) {
  const std::int64_t n = layer.in, m = layer.out;
  const std::int64_t body = n - n % 8;
  alignas(32) static constexpr int kLanes[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  const __m256i tail = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kLanes + 8 - n % 8));
  const bool has_tail = n % 8 != 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    std::int64_t o = 0;
    for (; o + 8 <= m; o += 8) {
      const float* w = layer.weight + o * n;
      __m256 acc[8];
      for (int k = 0; k < 8; ++k) acc[k] = _mm256_setzero_ps();
      for (std::int64_t i = 0; i < body; i += 8) {
        const __m256 xv = _mm256_loadu_ps(xr + i);
        for (int k = 0; k < 8; ++k) acc[k] = _mm256_fmadd_ps(xv, _mm256_loadu_ps(w + k * n + i), acc[k]);
      }
      if (has_tail) {
        const __m256 xv = _mm256_maskload_ps(xr + body, tail);
        for (int k = 0; k < 8; ++k) acc[k] = _mm256_fmadd_ps(xv, _mm256_maskload_ps(w + k * n + body, tail), acc[k]);
      }
      _mm256_storeu_ps(y + r * m + o, _mm256_add_ps(hsum8x8(acc), _mm256_loadu_ps(layer.bias + o)));
    }
    for (; o < m; ++o) {
      const float* w = layer.weight + o * n;
      __m256 acc = _mm256_setzero_ps();
      for (std::int64_t i = 0; i < body; i += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(xr + i), _mm256_loadu_ps(w + i), acc);
      if (has_tail) acc = _mm256_fmadd_ps(_mm256_maskload_ps(xr + body, tail), _mm256_maskload_ps(w + body, tail), acc);
      y[r * m + o] = hsum8(acc) + layer.bias[o];
    }
  }
}
#endif

inline void dense_affine(const float* x, std::int64_t rows, const DenseLayer& layer, float* y) {
#if RLBLOCKS_X86
  if (simd::cpu_has_avx2_fma()) {
    dense_affine_avx2(x, rows, layer, y);
    return;
  }
#endif
  dense_affine_portable(x, rows, layer, y);
}

}  // namespace detail

// out [rows, layers[n - 1].out] = the stack's output for x [rows, layers[0].in] (each layer's
// `in` equal to the previous layer's `out`; the caller checked). With no layers, out = x
// (out then has x's width). out must not overlap x.
inline void dense_forward(const float* x, std::int64_t rows, const DenseLayer* layers, std::int64_t n_layers,
                          std::int64_t in_width, float* out) {
  if (n_layers == 0) {
    std::copy(x, x + rows * in_width, out);
    return;
  }
  std::int64_t widest = 0;
  for (std::int64_t l = 0; l + 1 < n_layers; ++l) widest = std::max(widest, layers[l].out);
  std::vector<float> buf_a(static_cast<std::size_t>(rows * widest)), buf_b(buf_a.size());
  const float* src = x;
  for (std::int64_t l = 0; l < n_layers; ++l) {
    const DenseLayer& layer = layers[l];
    float* dst = l + 1 == n_layers ? out : (l % 2 == 0 ? buf_a.data() : buf_b.data());
    detail::dense_affine(src, rows, layer, dst);
    const std::int64_t count = rows * layer.out;
    if (layer.activation == DenseActivation::kTanh) {
      tanh_f32(dst, dst, count);
    } else if (layer.activation == DenseActivation::kRelu) {
      for (std::int64_t i = 0; i < count; ++i) dst[i] = dst[i] > 0.0f ? dst[i] : (dst[i] != dst[i] ? dst[i] : 0.0f);
    }
    src = dst;
  }
}

}  // namespace rlblocks
