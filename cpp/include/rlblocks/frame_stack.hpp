// Frame stacking for B environments x k frames: a ring buffer with one write position
// shared by every environment, and the stacked observation written in the requested layout.
//
// Layout of the ring: B x k slots of one frame each, allocated once. A reset fills all k
// slots of an environment with its reset frame (RLlib's FrameStack appends the reset
// observation k times), so every environment always holds exactly k frames and a single
// position `pos_` (the slot of the newest frame) serves all of them. A step writes each
// environment's new frame into slot (pos_ + 1) % k; the stack, oldest first, is then slots
// (pos_ + 1 + j) % k for j = 0..k-1.
//
// Stacked layouts (frames are given as (H, W, C), the elements are opaque bytes of size
// `elem`):
// * channels-last  (H, W, k*C): out[h, w, j*C + c] = frame_j[h, w, c]   (RLlib: concatenate
//   on axis 2). The ring keeps frames as given and the output interleaves k frames.
// * channels-first (k*C, H, W): out[j*C + c, h, w] = frame_j[h, w, c]. The ring keeps
//   frames transposed to (C, H, W) and doubled: 2k slots per environment, slot s + k a copy
//   of slot s, so the k frames of every stack lie contiguous (slots pos_ + 1 .. pos_ + k).
//   A stack is then one copy, or no copy at all: stacks_data() points at the stacks in
//   place (environment b's at + b * env_stride_bytes()).
//
// Work is split over environments with parallel_for. No allocation happens after
// construction. A step whose output is larger than the caches (>= 8 MiB, e.g. 1024 envs of
// 4x84x84) writes the DeepMind layout (k = 4 one-byte channels, channels-last) with
// non-temporal stores, which saves reading the output into the cache first (measured
// 15-35 % faster there; for channels-first copies it did not help, so they use memcpy).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "rlblocks/checked.hpp"
#include "rlblocks/thread_pool.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#define RLBLOCKS_FRAME_STACK_STREAM 1
#endif

namespace rlblocks {

namespace detail {

// out[p*K + j] = src[j][p] for p < P (units of type U).
template <class U, int K>
void interleave_fixed(const unsigned char* const* src, unsigned char* out_bytes, std::int64_t P) {
  const U* __restrict s[K];
  for (int j = 0; j < K; ++j) s[j] = reinterpret_cast<const U*>(src[j]);
  U* __restrict out = reinterpret_cast<U*>(out_bytes);
  for (std::int64_t p = 0; p < P; ++p) {
    for (int j = 0; j < K; ++j) out[p * K + j] = s[j][p];
  }
}

template <class U>
void interleave_strided(const unsigned char* const* src, std::int64_t k, unsigned char* out_bytes, std::int64_t P) {
  U* out = reinterpret_cast<U*>(out_bytes);
  for (std::int64_t j = 0; j < k; ++j) {
    const U* s = reinterpret_cast<const U*>(src[j]);
    for (std::int64_t p = 0; p < P; ++p) out[p * k + j] = s[p];
  }
}

#if defined(RLBLOCKS_FRAME_STACK_STREAM)
// The DeepMind case (k = 4 one-byte units) for outputs far larger than the caches: the same
// interleave as interleave_fixed<uint8_t, 4>, written with non-temporal stores so the output
// is not read into the cache first. out must be 16-byte aligned; the caller issues the fence.
inline void interleave4_u8_stream(const unsigned char* const* src, unsigned char* out, std::int64_t P) {
  std::int64_t p = 0;
  for (; p + 16 <= P; p += 16) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src[0] + p));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src[1] + p));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src[2] + p));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src[3] + p));
    const __m128i ab0 = _mm_unpacklo_epi8(a, b), ab1 = _mm_unpackhi_epi8(a, b);
    const __m128i cd0 = _mm_unpacklo_epi8(c, d), cd1 = _mm_unpackhi_epi8(c, d);
    __m128i* o = reinterpret_cast<__m128i*>(out + 4 * p);
    _mm_stream_si128(o + 0, _mm_unpacklo_epi16(ab0, cd0));
    _mm_stream_si128(o + 1, _mm_unpackhi_epi16(ab0, cd0));
    _mm_stream_si128(o + 2, _mm_unpacklo_epi16(ab1, cd1));
    _mm_stream_si128(o + 3, _mm_unpackhi_epi16(ab1, cd1));
  }
  for (; p < P; ++p) {
    for (int j = 0; j < 4; ++j) out[4 * p + j] = src[j][p];
  }
}

#endif

// Outputs of at least this many bytes per call use non-temporal stores where available.
constexpr std::int64_t kStreamBytes = std::int64_t{8} << 20;

inline void store_fence() {
#if defined(RLBLOCKS_FRAME_STACK_STREAM)
  _mm_sfence();
#endif
}

using InterleaveFn = void (*)(const unsigned char* const*, unsigned char*, std::int64_t);

template <class U>
InterleaveFn pick_fixed(std::int64_t k) {
  switch (k) {
    case 2: return &interleave_fixed<U, 2>;
    case 3: return &interleave_fixed<U, 3>;
    case 4: return &interleave_fixed<U, 4>;
    case 5: return &interleave_fixed<U, 5>;
    case 6: return &interleave_fixed<U, 6>;
    case 7: return &interleave_fixed<U, 7>;
    case 8: return &interleave_fixed<U, 8>;
    default: return nullptr;
  }
}

}  // namespace detail

class FrameStack {
 public:
  static constexpr std::int64_t kMaxK = 256;

  // Bytes of one frame, checked (SizeError when H * W * C * elem_size leaves int64).
  static std::int64_t frame_bytes(std::int64_t height, std::int64_t width, std::int64_t channels,
                                  std::int64_t elem_size) {
    const std::int64_t dims[] = {height, width, channels, elem_size};
    return checked_product(dims, 4, "FrameStack: frame bytes");
  }

  // num_envs >= 1, 1 <= k <= kMaxK, elem_size >= 1; height/width/channels may be 0.
  FrameStack(std::int64_t num_envs, std::int64_t k, std::int64_t height, std::int64_t width, std::int64_t channels,
             std::int64_t elem_size, bool channels_last)
      : num_envs_(num_envs),
        k_(k),
        height_(height),
        width_(width),
        channels_(channels),
        elem_(elem_size),
        channels_last_(channels_last),
        frame_bytes_(frame_bytes(height, width, channels, elem_size)),
        slots_(channels_last ? k : 2 * k),
        ring_(static_cast<std::size_t>(checked_mul(checked_mul(num_envs, slots_, "FrameStack: ring slots"),
                                                   frame_bytes_, "FrameStack: ring bytes"))),
        ready_(static_cast<std::size_t>(num_envs), 0) {
    if (num_envs < 1 || k < 1 || k > kMaxK || height < 0 || width < 0 || channels < 0 || elem_size < 1) {
      throw std::invalid_argument("FrameStack: invalid sizes");
    }
    const std::int64_t unit = channels_ * elem_;  // one pixel of one frame, in bytes
    unit_ = unit;
    switch (unit) {
      case 1: interleave_ = detail::pick_fixed<std::uint8_t>(k_); break;
      case 2: interleave_ = detail::pick_fixed<std::uint16_t>(k_); break;
      case 4: interleave_ = detail::pick_fixed<std::uint32_t>(k_); break;
      case 8: interleave_ = detail::pick_fixed<std::uint64_t>(k_); break;
      default: interleave_ = nullptr;
    }
  }

  std::int64_t num_envs() const { return num_envs_; }
  std::int64_t k() const { return k_; }
  std::int64_t frame_bytes() const { return frame_bytes_; }
  std::int64_t stacked_bytes() const { return k_ * frame_bytes_; }

  // Channels-first only: environment 0's current stack inside the ring (each next
  // environment's is env_stride_bytes() further), valid until the next push or reset.
  const unsigned char* stacks_data() const { return slot_ptr(0, pos_ + 1); }
  std::int64_t env_stride_bytes() const { return slots_ * frame_bytes_; }

  bool ready(std::int64_t env) const {
    std::lock_guard<std::mutex> lk(mu_);
    return ready_[static_cast<std::size_t>(env)] != 0;
  }

  // First environment that has never been reset and is not reset by `reset_mask`
  // (nullable, num_envs flags), or -1.
  std::int64_t first_unready(const std::uint8_t* reset_mask) const {
    std::lock_guard<std::mutex> lk(mu_);
    for (std::int64_t b = 0; b < num_envs_; ++b) {
      if (!ready_[static_cast<std::size_t>(b)] && !(reset_mask && reset_mask[b])) return b;
    }
    return -1;
  }

  // Fills every slot of envs ids[0..n) with frames[i] (frame i of a (n, H, W, C) buffer).
  // If out is not null, writes those envs' stacks to out[i]. ids must be valid and
  // distinct (the caller checked).
  void reset(const std::int64_t* ids, std::int64_t n, const unsigned char* frames, unsigned char* out) {
    std::lock_guard<std::mutex> lk(mu_);
    const std::int64_t grain = grain_for_bytes(2 * stacked_bytes());
    parallel_for(n, grain, [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) {
        fill_env(ids[i], frames + i * frame_bytes_);
        if (out) gather(ids[i], pos_, out + i * stacked_bytes());
      }
    });
    for (std::int64_t i = 0; i < n; ++i) ready_[static_cast<std::size_t>(ids[i])] = 1;
  }

  // One step for all envs: frames is (num_envs, H, W, C). Envs flagged in reset_mask
  // (nullable) are refilled with their frame, the others get it appended. Writes all
  // stacks to out (nullable). The caller checked that every env is ready or reset here.
  void push(const unsigned char* frames, const std::uint8_t* reset_mask, unsigned char* out) {
    std::lock_guard<std::mutex> lk(mu_);
    const std::int64_t slot = (pos_ + 1) % k_;
    const std::int64_t grain = grain_for_bytes(2 * stacked_bytes() + frame_bytes_);
    const bool stream = num_envs_ * stacked_bytes() >= detail::kStreamBytes;
    parallel_for(num_envs_, grain, [&](std::int64_t b0, std::int64_t b1) {
      for (std::int64_t b = b0; b < b1; ++b) {
        const unsigned char* frame = frames + b * frame_bytes_;
        if (reset_mask && reset_mask[b]) {
          fill_env(b, frame);
        } else {
          store_slot(b, slot, frame);
        }
        if (out) gather(b, slot, out + b * stacked_bytes(), stream);
      }
      if (stream) detail::store_fence();  // this thread's streamed stores, before it reports done
    });
    pos_ = slot;
    if (reset_mask) {
      for (std::int64_t b = 0; b < num_envs_; ++b) {
        if (reset_mask[b]) ready_[static_cast<std::size_t>(b)] = 1;
      }
    }
  }

  // The state, for copies and checkpoints: every env's k frames oldest first, each (H, W, C)
  // as given, into frames (num_envs * k frames), and whether each env has been reset into
  // ready (num_envs flags). An env never reset holds zeros.
  void save(unsigned char* frames, std::uint8_t* ready) const {
    std::lock_guard<std::mutex> lk(mu_);
    for (std::int64_t b = 0; b < num_envs_; ++b) {
      ready[b] = ready_[static_cast<std::size_t>(b)];
      for (std::int64_t j = 0; j < k_; ++j) {
        load_frame(slot_ptr(b, (pos_ + 1 + j) % k_), frames + (b * k_ + j) * frame_bytes_);
      }
    }
  }

  // Sets the state save() wrote: the caller checked the sizes, and that an env not ready
  // holds only zero bytes (as one never reset does).
  void restore(const unsigned char* frames, const std::uint8_t* ready) {
    std::lock_guard<std::mutex> lk(mu_);
    pos_ = k_ - 1;  // slots 0..k-1 hold the frames oldest first
    for (std::int64_t b = 0; b < num_envs_; ++b) {
      ready_[static_cast<std::size_t>(b)] = ready[b] ? 1 : 0;
      for (std::int64_t j = 0; j < k_; ++j) store_slot(b, j, frames + (b * k_ + j) * frame_bytes_);
    }
  }

  // The current stacks of all envs (num_envs stacked observations) into out.
  void observe(unsigned char* out) const {
    std::lock_guard<std::mutex> lk(mu_);
    const std::int64_t grain = grain_for_bytes(2 * stacked_bytes());
    parallel_for(num_envs_, grain, [&](std::int64_t b0, std::int64_t b1) {
      for (std::int64_t b = b0; b < b1; ++b) gather(b, pos_, out + b * stacked_bytes());
    });
  }

 private:
  unsigned char* slot_ptr(std::int64_t env, std::int64_t slot) {
    return ring_.data() + (env * slots_ + slot) * frame_bytes_;
  }
  const unsigned char* slot_ptr(std::int64_t env, std::int64_t slot) const {
    return ring_.data() + (env * slots_ + slot) * frame_bytes_;
  }

  // Writes a frame into slot (0 <= slot < k) of env, and into its copy in a doubled ring.
  void store_slot(std::int64_t env, std::int64_t slot, const unsigned char* frame) {
    unsigned char* dst = slot_ptr(env, slot);
    store_frame(frame, dst);
    if (slots_ != k_) std::memcpy(slot_ptr(env, slot + k_), dst, static_cast<std::size_t>(frame_bytes_));
  }

  // Copies a (H, W, C) frame into a ring slot in storage layout.
  void store_frame(const unsigned char* frame, unsigned char* dst) const {
    if (channels_last_ || channels_ == 1) {
      std::memcpy(dst, frame, static_cast<std::size_t>(frame_bytes_));
      return;
    }
    const std::int64_t pixels = height_ * width_;
    const auto e = static_cast<std::size_t>(elem_);
    for (std::int64_t c = 0; c < channels_; ++c) {
      unsigned char* plane = dst + c * pixels * elem_;
      const unsigned char* src = frame + c * elem_;
      for (std::int64_t p = 0; p < pixels; ++p) std::memcpy(plane + p * elem_, src + p * unit_, e);
    }
  }

  // Copies a ring slot back to a (H, W, C) frame (store_frame's inverse).
  void load_frame(const unsigned char* src, unsigned char* frame) const {
    if (channels_last_ || channels_ == 1) {
      std::memcpy(frame, src, static_cast<std::size_t>(frame_bytes_));
      return;
    }
    const std::int64_t pixels = height_ * width_;
    const auto e = static_cast<std::size_t>(elem_);
    for (std::int64_t c = 0; c < channels_; ++c) {
      const unsigned char* plane = src + c * pixels * elem_;
      unsigned char* dst = frame + c * elem_;
      for (std::int64_t p = 0; p < pixels; ++p) std::memcpy(dst + p * unit_, plane + p * elem_, e);
    }
  }

  void fill_env(std::int64_t env, const unsigned char* frame) {
    unsigned char* first = slot_ptr(env, 0);
    store_frame(frame, first);
    for (std::int64_t s = 1; s < slots_; ++s) {
      std::memcpy(slot_ptr(env, s), first, static_cast<std::size_t>(frame_bytes_));
    }
  }

  // Writes env's stack (newest frame in `newest`) to out, oldest first.
  void gather(std::int64_t env, std::int64_t newest, unsigned char* out, bool stream = false) const {
    if (frame_bytes_ == 0) return;
    if (!channels_last_) {  // contiguous in the doubled ring
      std::memcpy(out, slot_ptr(env, newest + 1), static_cast<std::size_t>(stacked_bytes()));
      return;
    }
    const unsigned char* src[kMaxK];
    for (std::int64_t j = 0; j < k_; ++j) src[j] = slot_ptr(env, (newest + 1 + j) % k_);
    if (k_ == 1) {
      std::memcpy(out, src[0], static_cast<std::size_t>(frame_bytes_));
      return;
    }
    const std::int64_t pixels = height_ * width_;
#if defined(RLBLOCKS_FRAME_STACK_STREAM)
    if (stream && unit_ == 1 && k_ == 4 && reinterpret_cast<std::uintptr_t>(out) % 16 == 0) {
      detail::interleave4_u8_stream(src, out, pixels);
      return;
    }
#else
    (void)stream;
#endif
    const bool aligned = reinterpret_cast<std::uintptr_t>(out) % static_cast<std::uintptr_t>(unit_) == 0;
    if (interleave_ && aligned) {
      interleave_(src, out, pixels);
      return;
    }
    switch (aligned ? unit_ : 0) {
      case 1: detail::interleave_strided<std::uint8_t>(src, k_, out, pixels); return;
      case 2: detail::interleave_strided<std::uint16_t>(src, k_, out, pixels); return;
      case 4: detail::interleave_strided<std::uint32_t>(src, k_, out, pixels); return;
      case 8: detail::interleave_strided<std::uint64_t>(src, k_, out, pixels); return;
      default: break;
    }
    const auto u = static_cast<std::size_t>(unit_);
    for (std::int64_t p = 0; p < pixels; ++p) {
      unsigned char* o = out + p * k_ * unit_;
      for (std::int64_t j = 0; j < k_; ++j) std::memcpy(o + j * unit_, src[j] + p * unit_, u);
    }
  }

  const std::int64_t num_envs_, k_, height_, width_, channels_, elem_;
  const bool channels_last_;
  const std::int64_t frame_bytes_;
  const std::int64_t slots_;  // ring slots per environment: k, or 2k (channels-first)
  std::int64_t unit_ = 1;
  detail::InterleaveFn interleave_ = nullptr;
  std::vector<unsigned char> ring_;
  std::vector<std::uint8_t> ready_;
  std::int64_t pos_ = 0;
  mutable std::mutex mu_;
};

}  // namespace rlblocks
