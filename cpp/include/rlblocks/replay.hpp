// Replay buffer kernels: per-environment rings, a sum tree (+ a min tree when prioritized),
// n-step assembly and frame-once stacking at sample time. Raw pointers, no Python.
//
// Storage. Capacity is split over the environments: each env owns a ring of L = capacity /
// num_envs entries (allocated once). An entry holds one stored frame (the newest frame of a
// stacked observation, or the whole observation when nothing is stacked), an action, a
// float32 reward, flags and `off`, the number of earlier entries of the same episode that
// its stack reads (min(position in episode, k - 1)). Each env counts the entries it ever
// wrote (`count`); absolute entry a lives in slot a % L and is kept while a >= count - L.
//
// An add writes, per env, a STEP entry (o_t, a_t, r_t, terminated/truncated of that step)
// and, when the episode ended at that step, a FINAL entry holding the final observation
// (no action; never sampled itself). The next add of that env starts a new episode.
//
// A STEP entry x is sampleable when its successor x + 1 exists and every entry its stack
// reads is still kept (x - off_x >= count - L). Sampleability lives in the sum tree: leaf
// env * L + slot holds 0 (not sampleable) or the entry's weight (1 when uniform, p^alpha
// when prioritized; a newly sampleable entry gets the largest weight set so far).
//
// n-step (at sample time, from x): sum_{i<k} gamma^i r_{x+i}, stopping after the step that
// terminated (discount 0), was truncated (discount gamma^k, the bootstrap reads the stored
// final observation), after n steps, or at the step whose successor is the env's newest
// entry (k < n there; the later steps do not exist yet). The next observation is x + k.
//
// A stack of entry x, oldest frame first: frame j is entry max(x - (k-1-j), x - off_x),
// so frames before the episode's first step repeat that first frame.
//
// Arithmetic that must equal the numpy twin bit for bit (rewards, discounts, tree sums and
// descents) is done in float64 in one fixed order; the build disables FMA contraction.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "rlblocks/checked.hpp"
#include "rlblocks/frame_stack.hpp"
#include "rlblocks/replay_tree.hpp"
#include "rlblocks/thread_pool.hpp"

namespace rlblocks {

struct ReplayConfig {
  std::int64_t num_envs = 1;
  std::int64_t per_env = 2;      // L, entries per env ring (>= 2)
  std::int64_t frame_bytes = 0;  // bytes of one stored frame
  std::int64_t elem = 1;         // bytes of one observation element
  std::int64_t k = 1;            // frames per stack (1: the observation is stored whole)
  bool stack_last = false;       // stack axis -1 (interleaved) instead of 0 (contiguous)
  std::int64_t action_bytes = 0;
  std::int64_t n_step = 1;
  double gamma = 0.99;
  bool prioritized = false;
};

// What a sample returns besides the assembled arrays.
struct ReplaySampleInfo {
  std::int64_t sampleable = 0;  // N, sampleable entries
  double total = 0.0;           // sum of the leaves
  double min_positive = 0.0;    // smallest positive leaf (prioritized)
};

class ReplayCore {
 public:
  static constexpr std::uint8_t kStep = 1, kTerm = 2, kTrunc = 4, kSample = 8;
  static constexpr std::int64_t kMaxK = 256;
  // The largest entry count of one env a state may hold (2**62: adds can never overflow it).
  static constexpr std::int64_t kMaxCount = std::int64_t{1} << 62;
  // The largest tree leaf ((p + eps) ** alpha): 2**960, so that the sum of any number of
  // leaves an int64 can count stays finite (2**960 * 2**63 < DBL_MAX).
  static constexpr double kMaxLeaf = 0x1p960;

  // Where an add's stacks disagree with the frames the buffer holds (env -1: nowhere).
  struct StackMismatch {
    std::int64_t env = -1;
    bool next_obs = false;  // in next_obs (the final observation) rather than obs
    std::int64_t frame = 0;
  };

  explicit ReplayCore(const ReplayConfig& c)
      : c_(c),
        entries_(checked_mul(c.num_envs, c.per_env, "ReplayBuffer: num_envs * per-env capacity")),
        frames_(static_cast<std::size_t>(checked_mul(entries_, c.frame_bytes, "ReplayBuffer: frame storage bytes"))),
        actions_(static_cast<std::size_t>(checked_mul(entries_, c.action_bytes, "ReplayBuffer: action bytes"))),
        rewards_(static_cast<std::size_t>(entries_), 0.0f),
        flags_(static_cast<std::size_t>(entries_), 0),
        offs_(static_cast<std::size_t>(entries_), 0),
        counts_(static_cast<std::size_t>(c.num_envs), 0),
        tree_(entries_, c.prioritized),
        jobs_(static_cast<std::size_t>(2 * c.num_envs)) {
    if (c.num_envs < 1 || c.per_env < 2 || c.k < 1 || c.k > kMaxK || c.elem < 1 || c.frame_bytes < 0 ||
        c.frame_bytes % c.elem != 0 || c.action_bytes < 0 || c.n_step < 1 || !(c.gamma >= 0.0 && c.gamma <= 1.0) ||
        (c.k > 1 && c.per_env < c.k + 1)) {
      throw std::invalid_argument("ReplayCore: invalid configuration");
    }
    stacked_bytes_ = checked_mul(c.frame_bytes, c.k, "ReplayBuffer: stacked observation bytes");
    const std::int64_t unit = c.elem;
    switch (unit) {
      case 1: interleave_ = detail::pick_fixed<std::uint8_t>(c.k); break;
      case 2: interleave_ = detail::pick_fixed<std::uint16_t>(c.k); break;
      case 4: interleave_ = detail::pick_fixed<std::uint32_t>(c.k); break;
      case 8: interleave_ = detail::pick_fixed<std::uint64_t>(c.k); break;
      default: interleave_ = nullptr;
    }
  }

  const ReplayConfig& config() const { return c_; }
  std::int64_t entries() const { return entries_; }
  std::int64_t stacked_bytes() const { return stacked_bytes_; }
  std::int64_t sampleable() const { return sampleable_; }
  double max_leaf() const { return max_leaf_; }
  double total() const { return tree_.total(); }
  std::int64_t nbytes() const {
    return static_cast<std::int64_t>(frames_.size() + actions_.size() + rewards_.size() * sizeof(float) +
                                     flags_.size() + offs_.size() + counts_.size() * sizeof(std::int64_t)) +
           tree_.nbytes();
  }

  // Raw storage (state save / load).
  std::vector<unsigned char>& frames() { return frames_; }
  std::vector<unsigned char>& actions() { return actions_; }
  std::vector<float>& rewards() { return rewards_; }
  std::vector<std::uint8_t>& flags() { return flags_; }
  std::vector<std::uint8_t>& offs() { return offs_; }
  std::vector<std::int64_t>& counts() { return counts_; }
  double leaf(std::int64_t i) const { return tree_.leaf(i); }
  const unsigned char* frame_data() const { return frames_.data(); }
  const std::uint8_t* flag_data() const { return flags_.data(); }
  const std::int64_t* count_data() const { return counts_.data(); }

  bool is_sampleable(std::int64_t index) const {
    return index >= 0 && index < entries_ && (flags_[static_cast<std::size_t>(index)] & kSample) != 0;
  }

  // One step of every env. obs / next_obs: num_envs stacked observations (k * frame_bytes
  // each); actions: num_envs * action_bytes; rewards: num_envs; terminated / truncated:
  // num_envs flags. next_obs is read only for envs whose episode ended.
  // `valid` (may be null: every env) marks the envs whose step is stored; the others (e.g. the
  // reset step of a next-step autoreset vector env) are skipped.
  void add(const unsigned char* obs, const unsigned char* actions, const float* rewards, const std::uint8_t* terminated,
           const std::uint8_t* truncated, const unsigned char* next_obs, const std::uint8_t* valid = nullptr) {
    std::size_t njobs = 0;
    for (std::int64_t e = 0; e < c_.num_envs; ++e) {
      if (valid != nullptr && !valid[e]) continue;
      const bool ended = terminated[e] || truncated[e];
      std::uint8_t f = kStep;
      if (terminated[e]) f |= kTerm;
      else if (truncated[e]) f |= kTrunc;
      const std::int64_t s = write_entry(e, f, actions + e * c_.action_bytes, rewards[e]);
      jobs_[njobs++] = {s, obs + e * stacked_bytes_};
      if (ended) {
        const std::int64_t s2 = write_entry(e, 0, nullptr, 0.0f);
        jobs_[njobs++] = {s2, next_obs + e * stacked_bytes_};
      }
    }
    const auto n = static_cast<std::int64_t>(njobs);
    parallel_for(n, grain_for_bytes(2 * c_.frame_bytes), [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) {
        const Job& j = jobs_[static_cast<std::size_t>(i)];
        store_newest(j.src, frames_.data() + j.entry * c_.frame_bytes);
      }
    });
  }

  // Sets the leaves of sampleable entries (the caller checked indices and values).
  void set_leaves(const std::int64_t* indices, const double* values, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) {
      tree_.set(indices[i], values[i]);
      max_leaf_ = std::max(max_leaf_, values[i]);
    }
  }

  // Draws B transitions: u in [0, 1) per sample (stratified when prioritized: b + u of B
  // slices of width total / B, so that no product overflows). Writes the leaf index and the
  // leaf (its weight, > 0; probability leaf / total) of each, and the assembled arrays. The
  // caller checked 1 <= B and that something is sampleable.
  ReplaySampleInfo sample(const double* u, std::int64_t B, std::int64_t* indices, double* leaves, unsigned char* obs,
                          unsigned char* actions, float* rewards, unsigned char* next_obs, float* discounts) const {
    const double total = tree_.total();
    const double slice = total / static_cast<double>(B);
    for (std::int64_t b = 0; b < B; ++b) {
      const double v = c_.prioritized ? (static_cast<double>(b) + u[b]) * slice : u[b] * total;
      const std::int64_t idx = tree_.find(v);
      indices[b] = idx;
      leaves[b] = tree_.leaf(idx);
    }
    parallel_for(B, grain_for_bytes(2 * stacked_bytes_ + 64), [&](std::int64_t b0, std::int64_t b1) {
      for (std::int64_t b = b0; b < b1; ++b) {
        assemble(indices[b], obs + b * stacked_bytes_, actions + b * c_.action_bytes, rewards + b,
                 next_obs + b * stacked_bytes_, discounts + b);
      }
    });
    return {sampleable_, total, tree_.min_positive()};
  }

  // The first env whose stacked observations in an add (before it is stored) are not what
  // frame-once storage rebuilds: a stack's frame j < k - 1 must be the newest frame of the
  // entry max(x - (k-1-j), x - off) (the env's previous steps; a new episode's stack repeats
  // its first frame), for obs and, when the episode ends, next_obs (the final observation).
  // Needs per_env >= k + 1 (every frame read is still kept); the caller holds the lock.
  StackMismatch find_stack_mismatch(const unsigned char* obs, const std::uint8_t* terminated,
                                    const std::uint8_t* truncated, const unsigned char* next_obs,
                                    const std::uint8_t* valid) const {
    if (c_.k < 2 || c_.frame_bytes == 0) return {};
    const std::int64_t k = c_.k;
    for (std::int64_t e = 0; e < c_.num_envs; ++e) {
      if (valid != nullptr && !valid[e]) continue;
      const unsigned char* o = obs + e * stacked_bytes_;
      const std::int64_t cnt = counts_[static_cast<std::size_t>(e)];
      const bool first = cnt == 0 || !(flags_at(e, cnt - 1) & kStep);
      const std::int64_t off = first ? 0 : std::min(off_at(e, cnt - 1) + 1, k - 1);
      for (std::int64_t j = 0; j + 1 < k; ++j) {
        const std::int64_t a = std::max(cnt - (k - 1 - j), cnt - off);
        const FrameView want = a == cnt ? stacked_frame(o, k - 1) : stored_frame(e, a);
        if (!same_frame(stacked_frame(o, j), want)) return {e, false, j};
      }
      if (!(terminated[e] || truncated[e])) continue;
      const unsigned char* n = next_obs + e * stacked_bytes_;
      const std::int64_t x = cnt + 1, off_final = std::min(off + 1, k - 1);
      for (std::int64_t j = 0; j + 1 < k; ++j) {
        const std::int64_t a = std::max(x - (k - 1 - j), x - off_final);
        const FrameView want = a == x     ? stacked_frame(n, k - 1)
                               : a == cnt ? stacked_frame(o, k - 1)
                                          : stored_frame(e, a);
        if (!same_frame(stacked_frame(n, j), want)) return {e, true, j};
      }
    }
    return {};
  }

  // After the storage and counts were loaded: checks every invariant of the state (counts,
  // never-written slots, the flags of each entry and the episode structure they spell, each
  // offset against its predecessor, the sample bits, the leaves against max_leaf), throwing
  // std::invalid_argument naming the field, then sets sampleability and rebuilds the trees.
  // The numpy twin checks the same things in the same order with the same messages.
  void restore(const double* leaves, double max_leaf) {
    const std::int64_t L = c_.per_env, k = c_.k;
    for (std::int64_t e = 0; e < c_.num_envs; ++e) {
      const std::int64_t cnt = counts_[static_cast<std::size_t>(e)];
      if (cnt < 0 || cnt > kMaxCount) {
        bad("state['counts'][" + std::to_string(e) + "] = " + std::to_string(cnt) + ": expected an int in [0, " +
            std::to_string(kMaxCount) + "]");
      }
    }
    sampleable_ = 0;
    max_leaf_ = max_leaf;
    std::vector<double> values(static_cast<std::size_t>(entries_), 0.0);
    for (std::int64_t e = 0; e < c_.num_envs; ++e) {
      const std::int64_t cnt = counts_[static_cast<std::size_t>(e)];
      const std::int64_t oldest = std::max<std::int64_t>(0, cnt - L);
      for (std::int64_t s = cnt; s < L; ++s) {  // never written: as a fresh buffer holds them
        const std::int64_t i = e * L + s;
        const std::string where = "[" + std::to_string(e) + ", " + std::to_string(s) + "]";
        const std::string why = ": slot " + std::to_string(s) + " of env " + std::to_string(e) +
                                " was never written (counts[" + std::to_string(e) + "] = " + std::to_string(cnt) +
                                "), expected 0";
        if (flag(e, s) != 0) bad("state['flags']" + where + " = " + std::to_string(flag(e, s)) + why);
        if (offs_[static_cast<std::size_t>(i)] != 0) {
          bad("state['offs']" + where + " = " + std::to_string(offs_[static_cast<std::size_t>(i)]) + why);
        }
        if (leaves[i] != 0.0) bad("state['leaves'][" + std::to_string(i) + "]" + why);
      }
      for (std::int64_t x = oldest; x < cnt; ++x) {
        const std::int64_t s = x % L, i = e * L + s;
        const std::uint8_t f = flag(e, s), base = static_cast<std::uint8_t>(f & ~kSample);
        const std::string where = "[" + std::to_string(e) + ", " + std::to_string(s) + "]";
        const std::string fl = "state['flags']" + where + " = " + std::to_string(f) + ": ";
        if (base != 0 && base != kStep && base != (kStep | kTerm) && base != (kStep | kTrunc)) {
          bad(fl +
              "expected 0 (a final observation) or 1, 3, 5 (a step; 3 terminated, 5 truncated), plus 8 when "
              "sampleable");
        }
        const bool ended = base == (kStep | kTerm) || base == (kStep | kTrunc);
        if (x == 0 && base == 0) bad(fl + "entry 0 of env " + std::to_string(e) + " is a final observation");
        if (x > oldest) {
          const std::uint8_t prev = static_cast<std::uint8_t>(flag(e, (x - 1) % L) & ~kSample);
          const bool prev_ended = prev == (kStep | kTerm) || prev == (kStep | kTrunc);
          if (prev_ended != (base == 0)) {
            bad(fl + "a final observation (0) must follow each terminated or truncated step, and nothing else");
          }
        }
        if (x == cnt - 1 && ended) {
          bad(fl + "the newest entry of env " + std::to_string(e) +
              " is a terminated or truncated step without its final observation");
        }
        const std::int64_t off = offs_[static_cast<std::size_t>(i)];
        if (x > oldest) {
          const bool cont = (flag(e, (x - 1) % L) & kStep) != 0;
          const std::int64_t want = cont ? std::min(off_at(e, x - 1) + 1, k - 1) : 0;
          if (off != want) {
            bad("state['offs']" + where + " = " + std::to_string(off) + ": expected " + std::to_string(want) +
                " (the entry's place in its episode, at most frame_stack - 1)");
          }
        } else if (off > std::min(k - 1, x)) {
          bad("state['offs']" + where + " = " + std::to_string(off) + ": expected at most " +
              std::to_string(std::min(k - 1, x)) + " (the entry's place in its episode, at most frame_stack - 1)");
        }
        const bool can = sampleable_now(e, x, cnt);
        if (can != ((f & kSample) != 0)) {
          bad(fl +
              "the sample bit (8) must be set exactly on the steps that can be sampled (a step whose "
              "successor is stored and whose stack's frames are kept)");
        }
        const std::string lf = "state['leaves'][" + std::to_string(i) + "]: ";
        if (!can) {
          if (leaves[i] != 0.0) bad(lf + "expected 0 (an entry that cannot be sampled)");
        } else if (!c_.prioritized) {
          if (leaves[i] != 1.0) bad(lf + "expected 1 (a sampleable step of a uniform buffer)");
        } else if (!(leaves[i] >= 0.0 && leaves[i] <= max_leaf)) {
          bad(lf + "expected a value in [0, max_leaf]");
        }
        if (can) {
          values[static_cast<std::size_t>(i)] = leaves[i];
          ++sampleable_;
        }
      }
    }
    for (std::int64_t i = 0; i < entries_; ++i) tree_.set_leaf_only(i, values[static_cast<std::size_t>(i)]);
    tree_.rebuild();
  }

 private:
  struct Job {
    std::int64_t entry = 0;
    const unsigned char* src = nullptr;
  };
  // One frame inside a stacked observation or the ring: unit p at p + p * stride.
  struct FrameView {
    const unsigned char* p;
    std::int64_t stride;
  };

  [[noreturn]] static void bad(const std::string& msg) { throw std::invalid_argument(msg); }

  FrameView stacked_frame(const unsigned char* stacked, std::int64_t j) const {
    if (!c_.stack_last) return {stacked + j * c_.frame_bytes, c_.elem};
    return {stacked + j * c_.elem, c_.k * c_.elem};
  }
  FrameView stored_frame(std::int64_t e, std::int64_t abs) const {
    return {frames_.data() + leaf_of(e, abs) * c_.frame_bytes, c_.elem};
  }
  // Bytewise (NaN and -0.0 compare as stored).
  bool same_frame(const FrameView& a, const FrameView& b) const {
    if (a.stride == c_.elem && b.stride == c_.elem) {
      return std::memcmp(a.p, b.p, static_cast<std::size_t>(c_.frame_bytes)) == 0;
    }
    const std::int64_t units = c_.frame_bytes / c_.elem;
    const auto u = static_cast<std::size_t>(c_.elem);
    for (std::int64_t q = 0; q < units; ++q) {
      if (std::memcmp(a.p + q * a.stride, b.p + q * b.stride, u) != 0) return false;
    }
    return true;
  }

  std::int64_t leaf_of(std::int64_t e, std::int64_t abs) const { return e * c_.per_env + abs % c_.per_env; }
  std::uint8_t& flag(std::int64_t e, std::int64_t slot) {
    return flags_[static_cast<std::size_t>(e * c_.per_env + slot)];
  }
  std::int64_t off_at(std::int64_t e, std::int64_t abs) const {
    return offs_[static_cast<std::size_t>(leaf_of(e, abs))];
  }
  std::uint8_t flags_at(std::int64_t e, std::int64_t abs) const {
    return flags_[static_cast<std::size_t>(leaf_of(e, abs))];
  }

  bool sampleable_now(std::int64_t e, std::int64_t x, std::int64_t cnt) const {
    const std::int64_t oldest = std::max<std::int64_t>(0, cnt - c_.per_env);
    return (flags_at(e, x) & kStep) && x + 1 < cnt && x - off_at(e, x) >= oldest;
  }

  void drop(std::int64_t e, std::int64_t abs) {
    const std::int64_t l = leaf_of(e, abs);
    std::uint8_t& f = flags_[static_cast<std::size_t>(l)];
    if (f & kSample) {
      f = static_cast<std::uint8_t>(f & ~kSample);
      tree_.set(l, 0.0);
      --sampleable_;
    }
  }

  // Bookkeeping of one new entry of env e (the frame is copied later); returns its leaf.
  std::int64_t write_entry(std::int64_t e, std::uint8_t f, const unsigned char* action, float reward) {
    const std::int64_t L = c_.per_env;
    const std::int64_t cnt = counts_[static_cast<std::size_t>(e)];
    if (cnt >= L) {  // overwrite the oldest, and the stacks that read it
      const std::int64_t gone = cnt - L;
      drop(e, gone);
      const std::int64_t last = std::min(gone + c_.k - 1, cnt - 1);
      for (std::int64_t x = gone + 1; x <= last; ++x) {
        if (off_at(e, x) >= x - gone) drop(e, x);
      }
    }
    const bool first = cnt == 0 || !(flags_at(e, cnt - 1) & kStep);
    const std::int64_t off = first ? 0 : std::min(off_at(e, cnt - 1) + 1, c_.k - 1);
    const std::int64_t l = leaf_of(e, cnt);
    flags_[static_cast<std::size_t>(l)] = f;
    offs_[static_cast<std::size_t>(l)] = static_cast<std::uint8_t>(off);
    rewards_[static_cast<std::size_t>(l)] = reward;
    unsigned char* a = actions_.data() + l * c_.action_bytes;
    if (action) std::memcpy(a, action, static_cast<std::size_t>(c_.action_bytes));
    else std::memset(a, 0, static_cast<std::size_t>(c_.action_bytes));
    counts_[static_cast<std::size_t>(e)] = cnt + 1;
    if (cnt >= 1 && sampleable_now(e, cnt - 1, cnt + 1)) {
      const std::int64_t pl = leaf_of(e, cnt - 1);
      flags_[static_cast<std::size_t>(pl)] |= kSample;
      tree_.set(pl, c_.prioritized ? max_leaf_ : 1.0);
      ++sampleable_;
    }
    return l;
  }

  // The newest frame of a stacked observation into a ring slot.
  void store_newest(const unsigned char* stacked, unsigned char* dst) const {
    if (c_.frame_bytes == 0) return;
    if (c_.k == 1 || !c_.stack_last) {
      std::memcpy(dst, stacked + (c_.k - 1) * c_.frame_bytes, static_cast<std::size_t>(c_.frame_bytes));
      return;
    }
    const std::int64_t units = c_.frame_bytes / c_.elem;
    const auto e = static_cast<std::size_t>(c_.elem);
    for (std::int64_t p = 0; p < units; ++p) {
      std::memcpy(dst + p * c_.elem, stacked + (p * c_.k + c_.k - 1) * c_.elem, e);
    }
  }

  // The stacked observation of entry x of env e.
  void gather(std::int64_t e, std::int64_t x, unsigned char* out) const {
    if (c_.frame_bytes == 0) return;
    const std::int64_t start = x - off_at(e, x);
    const unsigned char* src[kMaxK];
    for (std::int64_t j = 0; j < c_.k; ++j) {
      const std::int64_t a = std::max(x - (c_.k - 1 - j), start);
      src[j] = frames_.data() + leaf_of(e, a) * c_.frame_bytes;
    }
    if (c_.k == 1 || !c_.stack_last) {
      for (std::int64_t j = 0; j < c_.k; ++j) {
        std::memcpy(out + j * c_.frame_bytes, src[j], static_cast<std::size_t>(c_.frame_bytes));
      }
      return;
    }
    const std::int64_t units = c_.frame_bytes / c_.elem;
    const bool aligned = reinterpret_cast<std::uintptr_t>(out) % static_cast<std::uintptr_t>(c_.elem) == 0;
    if (interleave_ && aligned) {
      interleave_(src, out, units);
      return;
    }
    const auto u = static_cast<std::size_t>(c_.elem);
    for (std::int64_t p = 0; p < units; ++p) {
      unsigned char* o = out + p * c_.k * c_.elem;
      for (std::int64_t j = 0; j < c_.k; ++j) std::memcpy(o + j * c_.elem, src[j] + p * c_.elem, u);
    }
  }

  void assemble(std::int64_t idx, unsigned char* obs, unsigned char* action, float* reward, unsigned char* next_obs,
                float* discount) const {
    const std::int64_t L = c_.per_env;
    const std::int64_t e = idx / L, slot = idx % L;
    const std::int64_t cnt = counts_[static_cast<std::size_t>(e)];
    const std::int64_t oldest = std::max<std::int64_t>(0, cnt - L);
    const std::int64_t a = oldest + ((slot - oldest % L) % L + L) % L;
    double acc = 0.0, g = 1.0, disc = 0.0;
    std::int64_t next = a + 1;
    for (std::int64_t j = 0; j < c_.n_step; ++j) {
      const std::int64_t x = a + j;
      const std::uint8_t f = flags_at(e, x);
      const double r = static_cast<double>(rewards_[static_cast<std::size_t>(leaf_of(e, x))]);
      acc = acc + g * r;
      g = g * c_.gamma;
      if ((f & kTerm) || (f & kTrunc) || j + 1 == c_.n_step || x + 2 >= cnt) {
        next = x + 1;
        disc = (f & kTerm) ? 0.0 : g;
        break;
      }
    }
    *reward = static_cast<float>(acc);
    *discount = static_cast<float>(disc);
    std::memcpy(action, actions_.data() + leaf_of(e, a) * c_.action_bytes, static_cast<std::size_t>(c_.action_bytes));
    gather(e, a, obs);
    gather(e, next, next_obs);
  }

  ReplayConfig c_;
  std::int64_t entries_;
  std::int64_t stacked_bytes_ = 0;
  std::vector<unsigned char> frames_, actions_;
  std::vector<float> rewards_;
  std::vector<std::uint8_t> flags_, offs_;
  std::vector<std::int64_t> counts_;
  SumTree tree_;
  std::vector<Job> jobs_;
  detail::InterleaveFn interleave_ = nullptr;
  std::int64_t sampleable_ = 0;
  double max_leaf_ = 1.0;
};

}  // namespace rlblocks
