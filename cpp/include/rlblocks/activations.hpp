// Elementwise float32 tanh, vectorised (AVX2 + FMA, chosen at run time).
//
// The CPU builds of torch and numpy evaluate float32 tanh one element at a time on CPUs
// without AVX-512 (several ns per element), which makes it the most expensive op of a
// small tanh MLP's training step. This kernel evaluates 8 lanes at once, to about 1 ulp:
//
//   |x| < 0.55:  tanh(y) = y + y^3 P(y^2), P a degree-5 least-squares fit of
//                (tanh(y)/y - 1)/y^2 on [0, 0.55] (fitted for this kernel)
//   otherwise:   tanh(y) = 1 - 2 / (exp(2y) + 1), y clamped to 10 (tanh rounds to 1 from 9.01 on),
//                exp by 2^n * e^r, |r| <= ln2/2, with a degree-7 Taylor polynomial
//
// and the sign of x put back. NaN stays NaN, +-inf gives +-1, -0 gives -0. Without AVX2
// the loop calls std::tanh.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "rlblocks/simd.hpp"

namespace rlblocks {
namespace detail {

#if RLBLOCKS_X86
// tanh of 8 floats.
__attribute__((target("avx2,fma"))) inline __m256 tanh8(__m256 x) {
  const __m256 sign_mask = _mm256_set1_ps(-0.0f);
  const __m256 sign = _mm256_and_ps(x, sign_mask);
  // min(10, |x|): the NaN operand comes second so NaN passes through.
  const __m256 y = _mm256_min_ps(_mm256_set1_ps(10.0f), _mm256_andnot_ps(sign_mask, x));

  // small |x|: y + y * s * P(s), s = y^2
  const __m256 s = _mm256_mul_ps(y, y);
  __m256 p = _mm256_set1_ps(0.0024305908f);
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(-0.0084429067f));
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(0.0217917208f));
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(-0.0539608784f));
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(0.1333330125f));
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(-0.3333333433f));
  const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(y, s), p, y);

  // large |x|: 1 - 2 / (exp(2y) + 1)
  const __m256 z = _mm256_add_ps(y, y);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(z, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), z);   // ln2 high part
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860682030941723212e-6f), r);  // ln2 low part
  __m256 e = _mm256_set1_ps(1.0f / 5040.0f);
  e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.0f / 720.0f));
  e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.0f / 120.0f));
  e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.0f / 24.0f));
  e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.0f / 6.0f));
  e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(0.5f));
  e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.0f));
  e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.0f));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  e = _mm256_mul_ps(e, _mm256_castsi256_ps(bits));
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 large = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));

  const __m256 use_small = _mm256_cmp_ps(y, _mm256_set1_ps(0.55f), _CMP_LT_OQ);
  return _mm256_or_ps(_mm256_blendv_ps(large, small, use_small), sign);
}

__attribute__((target("avx2,fma"))) inline void tanh_avx2(const float* in, float* out, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, tanh8(_mm256_loadu_ps(in + i)));
  if (i < n) {  // the tail through a zero-padded block, so every element takes this path
    float buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const auto rest = static_cast<std::size_t>(n - i);
    std::memcpy(buf, in + i, rest * sizeof(float));
    _mm256_storeu_ps(buf, tanh8(_mm256_loadu_ps(buf)));
    std::memcpy(out + i, buf, rest * sizeof(float));
  }
}

#endif

}  // namespace detail

// out[i] = tanh(in[i]) for i in [0, n); `out` may be `in` (in place), no other overlap.
inline void tanh_f32(const float* in, float* out, std::int64_t n) {
#if RLBLOCKS_X86
  if (simd::cpu_has_avx2_fma()) {
    detail::tanh_avx2(in, out, n);
    return;
  }
#endif
  for (std::int64_t i = 0; i < n; ++i) out[i] = std::tanh(in[i]);
}

}  // namespace rlblocks
