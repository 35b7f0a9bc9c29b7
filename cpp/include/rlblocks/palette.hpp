// Palette-indexed screens (what ALE's getScreen returns: one palette index per pixel, a
// third of the RGB bytes and far cheaper to fetch than getScreenRGB).
//
// * has_unknown: whether a screen holds an index whose palette entry is not known yet (the
//   caller then fetches that screen in RGB once and learns the new entries).
// * resize_u8: expands each screen through a 256-entry RGB palette -- optionally the
//   element-wise max with a second screen first (MaxAndSkip's flicker removal), which is the
//   max of the two RGB frames -- and resizes it with image_resize.hpp's uint8 INTER_AREA kernel
//   (gray fused or colour). The result is exactly image::resize_u8 of the RGB frames.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "rlblocks/image_frames.hpp"
#include "rlblocks/image_resize.hpp"
#include "rlblocks/thread_pool.hpp"

namespace rlblocks {
namespace palette {

namespace detail {

inline bool has_unknown_scalar(const std::uint8_t* idx, std::int64_t j0, std::int64_t n, const std::uint8_t* known) {
  std::uint8_t all = 1;
  for (std::int64_t j = j0; j < n; ++j) all &= static_cast<std::uint8_t>(known[idx[j]] != 0);
  return all == 0;
}

#if RLBLOCKS_X86
// Set membership with two 16-byte tables: bit h of row[l] (h = index >> 4 mod 8, l = index & 15)
// says whether index is known; the high half (h >= 8) has its own row table.
__attribute__((target("avx2"))) inline bool has_unknown_avx2(const std::uint8_t* idx, std::int64_t n,
                                                             const std::uint8_t* known, std::int64_t& done) {
  alignas(16) std::uint8_t lo[16] = {0}, hi[16] = {0};
  for (int v = 0; v < 256; ++v) {
    if (known[v] == 0) continue;
    const int h = v >> 4, l = v & 15;
    if (h < 8) {
      lo[l] = static_cast<std::uint8_t>(lo[l] | (1 << h));
    } else {
      hi[l] = static_cast<std::uint8_t>(hi[l] | (1 << (h - 8)));
    }
  }
  const __m256i tlo = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(lo)));
  const __m256i thi = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(hi)));
  const __m256i bits = _mm256_setr_epi8(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32,
                                        64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
  const __m256i nib = _mm256_set1_epi8(0x0F), seven = _mm256_set1_epi8(7), zero = _mm256_setzero_si256();
  __m256i bad = zero;
  std::int64_t j = 0;
  for (; j + 32 <= n; j += 32) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(idx + j));
    const __m256i l = _mm256_and_si256(x, nib);
    const __m256i h = _mm256_and_si256(_mm256_srli_epi16(x, 4), nib);
    const __m256i row =
        _mm256_blendv_epi8(_mm256_shuffle_epi8(tlo, l), _mm256_shuffle_epi8(thi, l), _mm256_cmpgt_epi8(h, seven));
    const __m256i bit = _mm256_shuffle_epi8(bits, h);
    bad = _mm256_or_si256(bad, _mm256_cmpeq_epi8(_mm256_and_si256(row, bit), zero));
  }
  done = j;
  return _mm256_testz_si256(bad, bad) == 0;
}
#endif

// Channel-wise max of two packed RGBx colours.
inline std::uint32_t max_bytes(std::uint32_t x, std::uint32_t y) {
#if defined(__SSE2__)
  return static_cast<std::uint32_t>(
      _mm_cvtsi128_si32(_mm_max_epu8(_mm_cvtsi32_si128(static_cast<int>(x)), _mm_cvtsi32_si128(static_cast<int>(y)))));
#else
  std::uint32_t r = 0;
  for (int k = 0; k < 32; k += 8) r |= std::max((x >> k) & 0xFFu, (y >> k) & 0xFFu) << k;
  return r;
#endif
}

// rgb[p] = palette[a[p]], or the channel-wise max of palette[a[p]] and palette[b[p]].
// pal4: the palette packed as 4-byte RGBx words; every pixel is written with one 4-byte
// store (the next pixel overwrites the x byte), so rgb needs 1 byte of slack at the end.
inline void expand(const std::uint8_t* a, const std::uint8_t* b, std::int64_t n, const std::uint32_t* pal4,
                   std::uint8_t* rgb, std::int64_t p0 = 0) {
  if (b == nullptr) {
    for (std::int64_t p = p0; p < n; ++p) std::memcpy(rgb + 3 * p, pal4 + a[p], 4);
    return;
  }
  for (std::int64_t p = p0; p < n; ++p) {
    const std::uint32_t c = max_bytes(pal4[a[p]], pal4[b[p]]);  // branch-free: frames differ in scattered pixels
    std::memcpy(rgb + 3 * p, &c, 4);
  }
}

#if RLBLOCKS_X86
// expand() for blocks of 16 pixels that show one colour in both screens (large flat areas:
// most of an Atari screen): three shuffled copies of the colour make the 48 RGB bytes.
// Other blocks go pixel by pixel. Returns the first pixel it did not write.
__attribute__((target("avx2"))) inline std::int64_t expand_flat_blocks(const std::uint8_t* a, const std::uint8_t* b,
                                                                       std::int64_t n, const std::uint32_t* pal4,
                                                                       std::uint8_t* rgb) {
  const __m128i m0 = _mm_setr_epi8(0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0);
  const __m128i m1 = _mm_setr_epi8(1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1);
  const __m128i m2 = _mm_setr_epi8(2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2);
  std::int64_t p = 0;
  for (; p + 16 <= n; p += 16) {
    const __m128i va = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + p));
    const __m128i first = _mm_set1_epi8(static_cast<char>(a[p]));
    __m128i same = _mm_cmpeq_epi8(va, first);
    if (b != nullptr)
      same = _mm_and_si128(same, _mm_cmpeq_epi8(va, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + p))));
    std::uint8_t* o = rgb + 3 * p;
    if (_mm_movemask_epi8(same) == 0xFFFF) {
      const __m128i c = _mm_cvtsi32_si128(static_cast<int>(pal4[a[p]]));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o), _mm_shuffle_epi8(c, m0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 16), _mm_shuffle_epi8(c, m1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 32), _mm_shuffle_epi8(c, m2));
    } else if (b == nullptr) {
      for (std::int64_t q = p; q < p + 16; ++q) std::memcpy(rgb + 3 * q, pal4 + a[q], 4);
    } else {
      for (std::int64_t q = p; q < p + 16; ++q) {
        const std::uint32_t c = max_bytes(pal4[a[q]], pal4[b[q]]);
        std::memcpy(rgb + 3 * q, &c, 4);
      }
    }
  }
  return p;
}
#endif

}  // namespace detail

// Whether any of idx[0..n) has known[index] == 0 (known: 256 flags).
inline bool has_unknown(const std::uint8_t* idx, std::int64_t n, const std::uint8_t* known) {
  std::int64_t j = 0;
#if RLBLOCKS_X86
  if (image::detail::use_avx2() && detail::has_unknown_avx2(idx, n, known, j)) return true;
#endif
  return detail::has_unknown_scalar(idx, j, n, known);
}

// Indexed screens: frame b, row y, pixel x at data + b * frame_stride + y * width + x
// (rows contiguous). second (may be null) has the same layout.
struct IndexBatch {
  const std::uint8_t* data = nullptr;
  const std::uint8_t* second = nullptr;
  std::int64_t batch = 0, height = 0, width = 0, frame_stride = 0, second_stride = 0;
};

// out: contiguous (B, h_out, w_out, gray ? 1 : 3); pal: 256 x 3 RGB.
inline void resize_u8(const IndexBatch& src, const std::uint8_t* pal, std::int64_t h_out, std::int64_t w_out, bool gray,
                      std::uint8_t* out) {
  const image::ResizePlan plan = image::resize_plan(src.height, src.width, h_out, w_out);
  const std::int64_t pixels = src.height * src.width;
  const std::int64_t out_frame = h_out * w_out * (gray ? 1 : 3);
  std::uint32_t pal4[256];
  for (int i = 0; i < 256; ++i) {
    std::uint8_t c[4] = {pal[3 * i], pal[3 * i + 1], pal[3 * i + 2], 0};
    std::memcpy(pal4 + i, c, 4);
  }
  parallel_for(src.batch, image::frame_grain(3 * pixels), [&](std::int64_t b0, std::int64_t b1) {
    image::detail::U8Scratch s;
    thread_local std::vector<std::uint8_t> rgb;  // every byte read is written first
    if (rgb.size() < static_cast<std::size_t>(3 * pixels + 1)) rgb.resize(static_cast<std::size_t>(3 * pixels + 1));
    image::FrameBatch<std::uint8_t> f;
    f.data = rgb.data();
    f.batch = 1;
    f.height = src.height;
    f.width = src.width;
    f.channels = 3;
    f.frame_stride = 3 * pixels;
    f.row_stride = 3 * src.width;
    for (std::int64_t b = b0; b < b1; ++b) {
      const std::uint8_t* second = src.second != nullptr ? src.second + b * src.second_stride : nullptr;
      const std::uint8_t* first = src.data + b * src.frame_stride;
      std::int64_t p0 = 0;
#if RLBLOCKS_X86
      if (image::detail::use_avx2()) p0 = detail::expand_flat_blocks(first, second, pixels, pal4, rgb.data());
#endif
      detail::expand(first, second, pixels, pal4, rgb.data(), p0);
      image::detail::resize_frame_u8(f, 0, plan, gray, out + b * out_frame, s);
    }
  });
}

}  // namespace palette
}  // namespace rlblocks
