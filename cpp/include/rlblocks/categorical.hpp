// Categorical draws over rows of logits: log-softmax, then the inverse-CDF pick for a
// given uniform (the first index whose cumulative probability exceeds u * total), or the
// first maximum when no uniforms are given. float32 in the numpy twin's order of
// operations (python/rlblocks/_reference/categorical.py); exp and log are libm's, so the
// log-probabilities agree with the twin to about an ulp. The normaliser and the cumulative
// probabilities are summed in float64, in index order (the twin's cumsum): a float32 sum
// stops growing at 2**24 terms of 1, so K = 20M equal logits would give log-probabilities
// and picks of a distribution over 2**24 actions. In float64 any K the binding accepts
// is exact to float32 (K * 2**-53 relative error).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace rlblocks {

// Writes index[r] in [0, k) and logp[r] for every row; returns the first row whose logits
// are not all finite (nothing is drawn from it or after it), or -1.
inline std::int64_t categorical_draw(const float* logits, std::int64_t rows, std::int64_t k, const float* uniforms,
                                     std::int64_t* index, float* logp) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * k;
    float top = x[0];
    std::int64_t best = 0;
    for (std::int64_t j = 0; j < k; ++j) {
      if (!std::isfinite(x[j])) return r;
      if (x[j] > top) {
        top = x[j];
        best = j;
      }
    }
    double sum = 0.0;
    for (std::int64_t j = 0; j < k; ++j) sum += static_cast<double>(std::exp(x[j] - top));
    const auto log_sum = static_cast<float>(std::log(sum));
    std::int64_t pick = best;
    if (uniforms != nullptr) {
      double total = 0.0;  // the last cumulative probability
      for (std::int64_t j = 0; j < k; ++j) total += static_cast<double>(std::exp((x[j] - top) - log_sum));
      double u = static_cast<double>(uniforms[r]) * total;
      const double below = std::nextafter(total, 0.0);
      if (u > below) u = below;
      double cdf = 0.0;
      pick = 0;
      for (std::int64_t j = 0; j < k; ++j) {
        cdf += static_cast<double>(std::exp((x[j] - top) - log_sum));
        if (cdf <= u) pick = j + 1;
      }
      if (pick > k - 1) pick = k - 1;
    }
    index[r] = pick;
    logp[r] = (x[pick] - top) - log_sum;
  }
  return -1;
}

// Why masked_categorical_draw refused a batch (kNone: every row drawn).
enum class MaskedRefusal : int { kNone = 0, kNoLegalEntry = 1, kAllBelowFloor = 2, kNotFinite = 3 };

struct MaskedDrawStatus {
  std::int64_t row;  // the first refused row (-1 with kNone)
  MaskedRefusal why;
};

// The masked categorical draw of rows of logits [rows, k] with a mask of the same shape,
// as a masked model and MaskedCategorical draw it: masked[r, j] = FLOAT_MIN where
// mask[r, j] <= 0, else the logit (the distribution inputs); the distribution's rule then
// counts every masked value <= -1e8 as masked (FLOAT_MIN), and categorical_draw draws from
// those. Refuses (nothing drawn) a batch with a mask row without an entry > 0 (first, over
// all rows), then one with a row whose values are all <= -1e8, then one with a non-finite
// value; masked, index and logp are written only for a batch drawn.
inline MaskedDrawStatus masked_categorical_draw(const float* logits, const float* mask, std::int64_t rows,
                                                std::int64_t k, const float* uniforms, float* masked,
                                                std::int64_t* index, float* logp) {
  constexpr float kFloatMin = -std::numeric_limits<float>::max();  // torch.finfo(float32).min
  constexpr float kThreshold = -1e8f;                              // MASK_THRESHOLD
  for (std::int64_t r = 0; r < rows; ++r) {
    bool legal = false;
    for (std::int64_t j = 0; j < k; ++j) legal = legal || mask[r * k + j] > 0.0f;
    if (!legal) return {r, MaskedRefusal::kNoLegalEntry};
  }
  std::vector<float> floored(static_cast<std::size_t>(rows * k));
  for (std::int64_t r = 0; r < rows; ++r) {
    bool open = false;
    for (std::int64_t j = 0; j < k; ++j) {
      const std::int64_t i = r * k + j;
      const float x = mask[i] <= 0.0f ? kFloatMin : logits[i];
      floored[static_cast<std::size_t>(i)] = x <= kThreshold ? kFloatMin : x;
      open = open || !(x <= kThreshold);
    }
    if (!open) return {r, MaskedRefusal::kAllBelowFloor};
  }
  for (std::int64_t i = 0; i < rows * k; ++i) {
    if (!std::isfinite(floored[static_cast<std::size_t>(i)])) return {i / k, MaskedRefusal::kNotFinite};
  }
  for (std::int64_t i = 0; i < rows * k; ++i) masked[i] = mask[i] <= 0.0f ? kFloatMin : logits[i];
  categorical_draw(floored.data(), rows, k, uniforms, index, logp);
  return {-1, MaskedRefusal::kNone};
}

}  // namespace rlblocks
