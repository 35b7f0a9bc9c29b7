// SAC's squashed Gaussian over [-1, 1], element by element: the reparameterised draw and
// its log-density, and the gradient of `sum_j d_action * action + coef * logp` with respect
// to the distribution inputs. Inputs are rows of 2d floats (d means, then d log-stds, the
// layout of SquashedGaussian's inputs) and d standard-normal draws per row. float32 in the
// numpy twin's order of operations (python/rlblocks/_reference/squashed_gaussian.py). exp
// and log are libm's; tanh is activations.hpp's vectorised kernel (libm's tanhf costs more
// than the rest of an element together), all to about an ulp of the twin's.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "rlblocks/activations.hpp"

namespace rlblocks {

struct LogStdBounds {
  float low;   // log-stds are clamped to [low, high]
  float high;  // (MIN_LOG_NN_OUTPUT, MAX_LOG_NN_OUTPUT)
};

namespace detail {

constexpr float kHalfLog2Pi = 0.918938533204672742f;  // 0.5 * log(2 pi)
constexpr float kJacobianEps = 1e-6f;                 // SMALL_NUMBER in log(1 - tanh^2 + eps)
constexpr float kDensityBound = 100.0f;               // the Normal log-density is clamped to +-100

inline float clamp(float x, float lo, float hi) {
  // NaN stays NaN, as numpy's clip
  return x < lo ? lo : (x > hi ? hi : x);
}

// The draw's element-wise quantities, for all rows * d elements: stddev = exp(clamped
// log-std) and t = tanh(mean + std * noise), the rest derived from them per element.
struct SquashedDraw {
  std::vector<float> stddev, t;

  SquashedDraw(const float* inputs, const float* noise, std::int64_t rows, std::int64_t d, LogStdBounds bounds)
      : stddev(static_cast<std::size_t>(rows * d)), t(static_cast<std::size_t>(rows * d)) {
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* mean = inputs + r * 2 * d;
      for (std::int64_t j = 0; j < d; ++j) {
        const auto i = static_cast<std::size_t>(r * d + j);
        stddev[i] = std::exp(clamp(mean[d + j], bounds.low, bounds.high));
        t[i] = mean[j] + stddev[i] * noise[i];  // z, made tanh(z) below
      }
    }
    tanh_f32(t.data(), t.data(), rows * d);
  }
};

// One element's quantities that the log-density and its gradient read.
struct SquashedElement {
  float log_std, z, squashed, scaled, density, jacobian;
};

inline SquashedElement squashed_element(float mean, float raw_log_std, float noise, float sd, float t,
                                        LogStdBounds bounds) {
  SquashedElement e{};
  e.log_std = clamp(raw_log_std, bounds.low, bounds.high);
  e.z = mean + sd * noise;
  e.squashed = (t + 1.0f) / 2.0f * 2.0f + -1.0f;  // SquashedGaussian's squash into [-1, 1]
  e.scaled = (e.z - mean) / sd;
  e.density = -0.5f * e.scaled * e.scaled - e.log_std - kHalfLog2Pi;
  e.jacobian = 1.0f - t * t + kJacobianEps;
  return e;
}

}  // namespace detail

// action[r, j] = clamp(squash(mean + std * noise), -1, 1) and
// logp[r] = sum_j clamp(density, -100, 100) - sum_j log(1 - tanh^2 + 1e-6).
inline void squashed_gaussian_sample(const float* inputs, const float* noise, std::int64_t rows, std::int64_t d,
                                     LogStdBounds bounds, float* action, float* logp) {
  const detail::SquashedDraw draw(inputs, noise, rows, d, bounds);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* mean = inputs + r * 2 * d;
    float density_sum = 0.0f, log_jacobian_sum = 0.0f;
    for (std::int64_t j = 0; j < d; ++j) {
      const auto i = static_cast<std::size_t>(r * d + j);
      const auto e = detail::squashed_element(mean[j], mean[d + j], noise[i], draw.stddev[i], draw.t[i], bounds);
      action[i] = detail::clamp(e.squashed, -1.0f, 1.0f);
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
  const detail::SquashedDraw draw(inputs, noise, rows, d, bounds);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* mean = inputs + r * 2 * d;
    float* g = grad + r * 2 * d;
    for (std::int64_t j = 0; j < d; ++j) {
      const auto i = static_cast<std::size_t>(r * d + j);
      const float raw = mean[d + j], eps = noise[i], sd = draw.stddev[i], t = draw.t[i];
      const auto e = detail::squashed_element(mean[j], raw, eps, sd, t, bounds);
      const float da = d_action[i];
      float d_t = (e.squashed == 1.0f || e.squashed == -1.0f) ? 0.5f * da : da;
      d_t = d_t + coef_x2 * t / e.jacobian;
      float d_z = d_t * (1.0f - t * t);
      const bool in_density = e.density >= -detail::kDensityBound && e.density <= detail::kDensityBound;
      const float inside = static_cast<float>(in_density) * coef;
      d_z = d_z - inside * e.scaled / sd;
      const float d_mean = d_z + inside * e.scaled / sd;
      const float d_std = d_z * eps + inside * e.scaled * e.scaled / sd;
      const float d_log_std = d_std * sd - inside;
      const bool in_log_std = raw >= bounds.low && raw <= bounds.high;
      g[j] = d_mean;
      g[d + j] = d_log_std * static_cast<float>(in_log_std);
    }
  }
}

}  // namespace rlblocks
