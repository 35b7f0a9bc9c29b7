// Basic batched frame kernels for Atari-style pipelines: the frame-batch view every image
// kernel takes, RGB->gray, crop copies and the element-wise max of the last two frames.
//
// * rgb_to_gray: OpenCV's fixed-point luminance, (9798 R + 19235 G + 3735 B + 2^14) >> 15,
//   bit-identical to cv2.cvtColor(RGB2GRAY) on uint8 (the numpy twin in
//   rlblocks/_reference/image.py computes exactly the same integers).
// * Frames are (H, W, C) with contiguous pixels inside a row; batches and rows may be
//   strided (a crop is just a view), everything else is validated by the bindings.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "rlblocks/thread_pool.hpp"

namespace rlblocks {
namespace image {

constexpr int kGrayShift = 15;
constexpr std::uint32_t kGrayR = 9798, kGrayG = 19235, kGrayB = 3735;

// A batch of frames: frame b, row y, pixel x, channel c is at
// data + b * frame_stride + y * row_stride + x * channels + c (strides in elements).
template <class T>
struct FrameBatch {
  const T* data = nullptr;
  std::int64_t batch = 0, height = 0, width = 0, channels = 0;
  std::int64_t frame_stride = 0, row_stride = 0;
  const T* row(std::int64_t b, std::int64_t y) const { return data + b * frame_stride + y * row_stride; }
};

// Frames per task: roughly 96 KiB of input per chunk, so one Atari frame is one task.
inline std::int64_t frame_grain(std::int64_t bytes_per_frame) { return grain_for_bytes(bytes_per_frame); }

namespace detail {

inline void gray_row(const std::uint8_t* rgb, std::int64_t width, std::uint8_t* g) {
  for (std::int64_t x = 0; x < width; ++x) {
    const std::uint32_t r = rgb[3 * x], gg = rgb[3 * x + 1], b = rgb[3 * x + 2];
    g[x] = static_cast<std::uint8_t>((kGrayR * r + kGrayG * gg + kGrayB * b + (1u << (kGrayShift - 1))) >> kGrayShift);
  }
}

}  // namespace detail

// out: contiguous (B, H, W, 1).
inline void rgb_to_gray(const FrameBatch<std::uint8_t>& src, std::uint8_t* out) {
  const std::int64_t hw = src.height * src.width;
  parallel_for(src.batch, frame_grain(hw * 3), [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b) {
      for (std::int64_t y = 0; y < src.height; ++y)
        detail::gray_row(src.row(b, y), src.width, out + b * hw + y * src.width);
    }
  });
}

// Copies a batch of (rows, row_bytes) blocks (a crop is a strided view) into contiguous out.
inline void copy_blocks(const std::uint8_t* src, std::int64_t batch, std::int64_t rows, std::int64_t row_bytes,
                        std::int64_t frame_stride, std::int64_t row_stride, std::uint8_t* out) {
  parallel_for(batch, frame_grain(rows * row_bytes), [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b) {
      for (std::int64_t y = 0; y < rows; ++y) {
        std::memcpy(out + (b * rows + y) * row_bytes, src + b * frame_stride + y * row_stride,
                    static_cast<std::size_t>(row_bytes));
      }
    }
  });
}

// out[o, i] = max(src[o, t - 2, i], src[o, t - 1, i]) for a contiguous (outer, t, inner).
template <class T>
inline void max_last_two(const T* src, std::int64_t outer, std::int64_t t, std::int64_t inner, T* out) {
  const std::int64_t grain = std::max<std::int64_t>(
      1, (256 * 1024) / std::max<std::int64_t>(1, inner * 2 * static_cast<std::int64_t>(sizeof(T))));
  parallel_for(outer, grain, [&](std::int64_t o0, std::int64_t o1) {
    for (std::int64_t o = o0; o < o1; ++o) {
      const T* a = src + (o * t + t - 2) * inner;
      const T* b = a + inner;
      T* d = out + o * inner;
      for (std::int64_t i = 0; i < inner; ++i) d[i] = a[i] < b[i] ? b[i] : a[i];
    }
  });
}

}  // namespace image
}  // namespace rlblocks
