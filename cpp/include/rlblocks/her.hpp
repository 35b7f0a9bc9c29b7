// Hindsight experience replay (HER): relabels a sampled batch of the replay buffer
// (rlblocks/replay.hpp) with goals its episodes achieved. Raw pointers, no Python.
//
// Goals are indices into stored steps, never stored twice. A sampled step t (absolute entry a
// of env e, n_step 1) gets the goal of a step g of the SAME episode of the same env ring:
// `future` g uniform in [t, last], `final` g = last, `episode` g uniform in [first, last],
// where first is the episode's oldest step still kept in the ring (never crossing an
// overwritten slot or the previous episode's final entry) and last its newest step whose
// successor is stored: the terminated / truncated step, or for the still-running episode the
// step before the env's newest entry (only steps already added).
//
// The achieved goal of step g is the achieved goal of the observation AFTER its action: the
// frame of entry g + 1 (the next step's observation, or the stored final observation). Its
// `goal_bytes` at byte `ag` of that frame are copied to byte `dg` (the desired goal) of the
// sampled obs and next_obs rows. The first `n_relabel` samples of the batch are relabelled,
// the others keep their goals (goal index -1). Pick: j = floor(u * n), clamped to n - 1.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace rlblocks {

enum class HerStrategy : int { kFuture = 0, kFinal = 1, kEpisode = 2 };

struct HerStorage {
  const unsigned char* frames = nullptr;  // num_envs * per_env frames of frame_bytes
  const std::uint8_t* flags = nullptr;    // the replay's entry flags (kStep 1, kTerm 2, kTrunc 4)
  const std::int64_t* counts = nullptr;   // entries ever written per env
  std::int64_t per_env = 2;
  std::int64_t frame_bytes = 0;
};

struct HerGoalSlots {
  std::int64_t ag = 0;  // byte offset of the achieved goal in a frame / row
  std::int64_t dg = 0;  // byte offset of the desired goal
  std::int64_t bytes = 0;
};

namespace detail {
constexpr std::uint8_t kHerStep = 1, kHerEnded = 2 | 4;

inline std::uint8_t her_flag(const HerStorage& s, std::int64_t e, std::int64_t x) {
  return s.flags[e * s.per_env + x % s.per_env];
}
}  // namespace detail

// The absolute entry of leaf `idx` (env idx / per_env, slot idx % per_env).
inline std::int64_t her_absolute(const HerStorage& s, std::int64_t idx) {
  const std::int64_t L = s.per_env, e = idx / L, slot = idx % L;
  const std::int64_t cnt = s.counts[e];
  const std::int64_t oldest = std::max<std::int64_t>(0, cnt - L);
  return oldest + ((slot - oldest % L) % L + L) % L;
}

// [first, last]: the goal steps of the episode of sampled step a of env e (see above).
inline void her_episode(const HerStorage& s, std::int64_t e, std::int64_t a, std::int64_t* first, std::int64_t* last) {
  const std::int64_t cnt = s.counts[e];
  const std::int64_t oldest = std::max<std::int64_t>(0, cnt - s.per_env);
  std::int64_t hi = a;
  while (!(detail::her_flag(s, e, hi) & detail::kHerEnded) && hi + 2 < cnt) ++hi;
  std::int64_t lo = a;
  while (lo - 1 >= oldest) {
    const std::uint8_t f = detail::her_flag(s, e, lo - 1);
    if (!(f & detail::kHerStep) || (f & detail::kHerEnded)) break;
    --lo;
  }
  *first = lo;
  *last = hi;
}

// Relabels rows b < n_relabel of obs / next_obs (row_bytes each) for the sampled leaves
// `indices` (sampleable steps, checked by the caller) with uniforms u; writes each row's goal
// leaf (env * per_env + slot of step g) to goals, -1 for the rows left alone.
inline void her_relabel(const HerStorage& s, const HerGoalSlots& slots, HerStrategy strategy,
                        const std::int64_t* indices, const double* u, std::int64_t B, std::int64_t n_relabel,
                        unsigned char* obs, unsigned char* next_obs, std::int64_t row_bytes, std::int64_t* goals) {
  const std::int64_t L = s.per_env;
  for (std::int64_t b = 0; b < B; ++b) {
    if (b >= n_relabel) {
      goals[b] = -1;
      continue;
    }
    const std::int64_t e = indices[b] / L, a = her_absolute(s, indices[b]);
    std::int64_t first = a, last = a;
    her_episode(s, e, a, &first, &last);
    std::int64_t g = last;
    if (strategy != HerStrategy::kFinal) {
      const std::int64_t lo = strategy == HerStrategy::kFuture ? a : first;
      const std::int64_t n = last - lo + 1;
      std::int64_t j = static_cast<std::int64_t>(u[b] * static_cast<double>(n));
      if (j > n - 1) j = n - 1;
      g = lo + j;
    }
    goals[b] = e * L + g % L;
    const unsigned char* src = s.frames + (e * L + (g + 1) % L) * s.frame_bytes + slots.ag;
    const auto nb = static_cast<std::size_t>(slots.bytes);
    std::memcpy(obs + b * row_bytes + slots.dg, src, nb);
    std::memcpy(next_obs + b * row_bytes + slots.dg, src, nb);
  }
}

}  // namespace rlblocks
