// The diagonal Gaussian's draw and its log-density, row by row: inputs are rows of 2d
// floats (d means, then d log-stds, DiagGaussian's layout), the log-stds clamped to
// [-bound, bound]; with d standard-normal draws per row the action is mean + std * noise,
// without them the mean. float32 in the numpy twin's order of operations
// (python/rlblocks/_reference/diag_gaussian.py), the log-density summed in index order;
// exp is libm's, to about an ulp of the twin's.
#pragma once

#include <cmath>
#include <cstdint>

namespace rlblocks {

// Writes actions[r, j] (rows x d) and logp[r] for every row.
inline void diag_gaussian_draw(const float* inputs, std::int64_t rows, std::int64_t d, const float* noise, float bound,
                               float* actions, float* logp) {
  constexpr float kHalfLog2Pi = 0.918938533204672742f;  // 0.5 * log(2 pi)
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* mean = inputs + r * 2 * d;
    float total = 0.0f;
    for (std::int64_t j = 0; j < d; ++j) {
      const float raw = mean[d + j];
      // np.minimum(np.maximum(x, -bound), bound): NaN stays NaN
      const float log_std = raw < -bound ? -bound : (raw > bound ? bound : raw);
      float term;
      if (noise != nullptr) {
        const float stddev = std::exp(log_std);
        const float a = mean[j] + stddev * noise[r * d + j];
        const float z = (a - mean[j]) / stddev;
        actions[r * d + j] = a;
        term = -0.5f * z * z - log_std - kHalfLog2Pi;
      } else {
        actions[r * d + j] = mean[j];
        term = -log_std - kHalfLog2Pi;
      }
      total = j == 0 ? term : total + term;
    }
    logp[r] = total;
  }
}

}  // namespace rlblocks
