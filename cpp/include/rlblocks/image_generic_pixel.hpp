// RLlib's GenericPixelPreprocessor with correct float maths: crop rows 25 .. H-25, resize to
// 84x84 first when dim < 84, then to dim x dim (uint8 input rounds to uint8 after each
// resize like OpenCV; float input stays float32), then the channel mean (in double, cast to
// float32) when grayscale, then (x - 128) / 128 or x * float32(1/255) in float32.
// out: contiguous (B, dim, dim, grayscale ? 1 : 3) float32.
#pragma once

#include <cstdint>
#include <vector>

#include "rlblocks/image_frames.hpp"
#include "rlblocks/image_resize.hpp"
#include "rlblocks/thread_pool.hpp"

namespace rlblocks {
namespace image {

namespace detail {

inline float pixel_norm(float x, bool zero_mean) {
  return zero_mean ? (x - 128.0f) / 128.0f : x * static_cast<float>(1.0 / 255.0);
}

template <class T>
inline void finish_generic(const T* img, std::int64_t dim, bool grayscale, bool zero_mean, float* out) {
  const std::int64_t n = dim * dim;
  if (grayscale) {
    for (std::int64_t p = 0; p < n; ++p) {
      const double m = (static_cast<double>(img[3 * p]) + static_cast<double>(img[3 * p + 1]) +
                        static_cast<double>(img[3 * p + 2])) /
                       3.0;
      out[p] = pixel_norm(static_cast<float>(m), zero_mean);
    }
  } else {
    for (std::int64_t p = 0; p < 3 * n; ++p) out[p] = pixel_norm(static_cast<float>(img[p]), zero_mean);
  }
}

}  // namespace detail

constexpr std::int64_t kGenericCrop = 25;
constexpr std::int64_t kGenericFirstDim = 84;

inline void generic_pixel_u8(const FrameBatch<std::uint8_t>& src, std::int64_t dim, bool grayscale, bool zero_mean,
                             float* out) {
  const std::int64_t h = src.height - 2 * kGenericCrop;
  const bool two_step = dim < kGenericFirstDim;
  const ResizePlan first =
      two_step ? resize_plan(h, src.width, kGenericFirstDim, kGenericFirstDim) : resize_plan(h, src.width, dim, dim);
  const ResizePlan second = two_step ? resize_plan(kGenericFirstDim, kGenericFirstDim, dim, dim) : ResizePlan{};
  const std::int64_t out_frame = dim * dim * (grayscale ? 1 : 3);
  FrameBatch<std::uint8_t> cropped = src;
  cropped.data = src.data + kGenericCrop * src.row_stride;
  cropped.height = h;
  parallel_for(src.batch, frame_grain(src.height * src.width * 3), [&](std::int64_t b0, std::int64_t b1) {
    detail::U8Scratch s;
    std::vector<std::uint8_t> mid(static_cast<std::size_t>(kGenericFirstDim * kGenericFirstDim * 3));
    std::vector<std::uint8_t> img(static_cast<std::size_t>(dim * dim * 3));
    for (std::int64_t b = b0; b < b1; ++b) {
      if (two_step) {
        detail::resize_frame_u8(cropped, b, first, false, mid.data(), s);
        FrameBatch<std::uint8_t> m{mid.data(),          1, kGenericFirstDim,
                                   kGenericFirstDim,    3, kGenericFirstDim * kGenericFirstDim * 3,
                                   kGenericFirstDim * 3};
        detail::resize_frame_u8(m, 0, second, false, img.data(), s);
      } else {
        detail::resize_frame_u8(cropped, b, first, false, img.data(), s);
      }
      detail::finish_generic(img.data(), dim, grayscale, zero_mean, out + b * out_frame);
    }
  });
}

inline void generic_pixel_f32(const FrameBatch<float>& src, std::int64_t dim, bool grayscale, bool zero_mean,
                              float* out) {
  const std::int64_t h = src.height - 2 * kGenericCrop;
  const bool two_step = dim < kGenericFirstDim;
  const ResizePlan first =
      two_step ? resize_plan(h, src.width, kGenericFirstDim, kGenericFirstDim) : resize_plan(h, src.width, dim, dim);
  const ResizePlan second = two_step ? resize_plan(kGenericFirstDim, kGenericFirstDim, dim, dim) : ResizePlan{};
  const std::int64_t out_frame = dim * dim * (grayscale ? 1 : 3);
  FrameBatch<float> cropped = src;
  cropped.data = src.data + kGenericCrop * src.row_stride;
  cropped.height = h;
  parallel_for(src.batch, frame_grain(src.height * src.width * 12), [&](std::int64_t b0, std::int64_t b1) {
    std::vector<double> acc;
    std::vector<float> mid(static_cast<std::size_t>(kGenericFirstDim * kGenericFirstDim * 3));
    std::vector<float> img(static_cast<std::size_t>(dim * dim * 3));
    for (std::int64_t b = b0; b < b1; ++b) {
      if (two_step) {
        detail::resize_frame_f32(cropped, b, first, mid.data(), acc);
        FrameBatch<float> m{mid.data(),          1, kGenericFirstDim,
                            kGenericFirstDim,    3, kGenericFirstDim * kGenericFirstDim * 3,
                            kGenericFirstDim * 3};
        detail::resize_frame_f32(m, 0, second, img.data(), acc);
      } else {
        detail::resize_frame_f32(cropped, b, first, img.data(), acc);
      }
      detail::finish_generic(img.data(), dim, grayscale, zero_mean, out + b * out_frame);
    }
  });
}

}  // namespace image
}  // namespace rlblocks
