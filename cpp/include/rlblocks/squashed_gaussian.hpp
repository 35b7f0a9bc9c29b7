// SAC's squashed Gaussian over [-1, 1], element by element: the reparameterised draw and
// its log-density, and the gradient of `sum_j d_action * action + coef * logp` with respect
// to the distribution inputs. Inputs are rows of 2d floats (d means, then d log-stds, the
// layout of SquashedGaussian's inputs) and d standard-normal draws per row. float32 in the
// numpy twin's order of operations (python/rlblocks/_reference/squashed_gaussian.py); exp,
// tanh and log are libm's, so the results agree with the twin to about an ulp.
#pragma once

#include <cmath>
#include <cstdint>

namespace rlblocks {

struct LogStdBounds {
  float low;   // log-stds are clamped to [low, high]
  float high;  // (MIN_LOG_NN_OUTPUT, MAX_LOG_NN_OUTPUT)
};

namespace detail {

constexpr float kHalfLog2Pi = 0.918938533204672742f;  // 0.5 * log(2 pi)
constexpr float kJacobianEps = 1e-6f;                 // SMALL_NUMBER in log(1 - tanh^2 + eps)
constexpr float kDensityBound = 100.0f;               // the Normal log-density is clamped to +-100

// One element's forward quantities (what the gradient reads again).
struct SquashedElement {
  float log_std, std, z, t, squashed, scaled, density, jacobian;
};

inline float clamp(float x, float lo, float hi) {
  // NaN stays NaN, as numpy's clip
  return x < lo ? lo : (x > hi ? hi : x);
}

inline SquashedElement squashed_element(float mean, float raw_log_std, float noise, LogStdBounds bounds) {
  SquashedElement e{};
  e.log_std = clamp(raw_log_std, bounds.low, bounds.high);
  e.std = std::exp(e.log_std);
  e.z = mean + e.std * noise;
  e.t = std::tanh(e.z);
  e.squashed = (e.t + 1.0f) / 2.0f * 2.0f + -1.0f;  // SquashedGaussian's squash into [-1, 1]
  e.scaled = (e.z - mean) / e.std;
  e.density = -0.5f * e.scaled * e.scaled - e.log_std - kHalfLog2Pi;
  e.jacobian = 1.0f - e.t * e.t + kJacobianEps;
  return e;
}

}  // namespace detail

// action[r, j] = clamp(squash(mean + std * noise), -1, 1) and
// logp[r] = sum_j clamp(density, -100, 100) - sum_j log(1 - tanh^2 + 1e-6).
inline void squashed_gaussian_sample(const float* inputs, const float* noise, std::int64_t rows, std::int64_t d,
                                     LogStdBounds bounds, float* action, float* logp) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* mean = inputs + r * 2 * d;
    float density_sum = 0.0f, log_jacobian_sum = 0.0f;
    for (std::int64_t j = 0; j < d; ++j) {
      const auto e = detail::squashed_element(mean[j], mean[d + j], noise[r * d + j], bounds);
      action[r * d + j] = detail::clamp(e.squashed, -1.0f, 1.0f);
      density_sum += detail::clamp(e.density, -detail::kDensityBound, detail::kDensityBound);
      log_jacobian_sum += std::log(e.jacobian);
    }
    logp[r] = density_sum - log_jacobian_sum;
  }
}

// grad[r, :] ([rows, 2d]: means, then raw log-stds) of sum_rj d_action[r, j] * action[r, j]
// + coef * sum_r logp[r], through the clamps as torch differentiates them: a clamp passes
// the gradient inside its bounds (bounds included), and the action's clamp at exactly +-1
// passes half (a tie of torch.maximum / torch.minimum). `coef_x2` is `2 * coef` rounded
// once, as the twin rounds it.
inline void squashed_gaussian_grad(const float* inputs, const float* noise, const float* d_action, std::int64_t rows,
                                   std::int64_t d, LogStdBounds bounds, float coef, float coef_x2, float* grad) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* mean = inputs + r * 2 * d;
    float* g = grad + r * 2 * d;
    for (std::int64_t j = 0; j < d; ++j) {
      const float raw = mean[d + j];
      const float eps = noise[r * d + j];
      const auto e = detail::squashed_element(mean[j], raw, eps, bounds);
      const float da = d_action[r * d + j];
      float d_t = (e.squashed == 1.0f || e.squashed == -1.0f) ? 0.5f * da : da;
      d_t = d_t + coef_x2 * e.t / e.jacobian;
      float d_z = d_t * (1.0f - e.t * e.t);
      const bool in_density = e.density >= -detail::kDensityBound && e.density <= detail::kDensityBound;
      const float inside = static_cast<float>(in_density) * coef;
      d_z = d_z - inside * e.scaled / e.std;
      const float d_mean = d_z + inside * e.scaled / e.std;
      const float d_std = d_z * eps + inside * e.scaled * e.scaled / e.std;
      const float d_log_std = d_std * e.std - inside;
      const bool in_log_std = raw >= bounds.low && raw <= bounds.high;
      g[j] = d_mean;
      g[d + j] = d_log_std * static_cast<float>(in_log_std);
    }
  }
}

}  // namespace rlblocks
