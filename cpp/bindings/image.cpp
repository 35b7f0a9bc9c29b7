// Bindings for the image kernels. Every function validates its arrays with the GIL held
// (dtype, rank, shape, strides, a writeable contiguous `out` that does not overlap the
// input) and only then releases the GIL around the kernel, so a bad argument raises
// ValueError before anything is written. The Python layer (rlblocks.image) converts
// inputs (dtype, layout) before calling; these functions never convert, they refuse.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "rlblocks/checked.hpp"
#include "rlblocks/image_frames.hpp"
#include "rlblocks/image_generic_pixel.hpp"
#include "rlblocks/image_resize.hpp"
#include "rlblocks/palette.hpp"

namespace py = pybind11;

namespace rlblocks::bindings {
namespace {

namespace img = rlblocks::image;

bool is_u8(const py::array& a) { return a.dtype().equal(py::dtype::of<std::uint8_t>()); }
bool is_f32(const py::array& a) { return a.dtype().equal(py::dtype::of<float>()); }

py::array as_array(const py::handle& obj, const char* fn, const char* what) {
  if (!py::isinstance<py::array>(obj)) {
    throw py::value_error(std::string(fn) + ": " + what + " must be a numpy array, got " +
                          std::string(Py_TYPE(obj.ptr())->tp_name));
  }
  return py::reinterpret_borrow<py::array>(obj);
}

// A (B, H, W, C) batch whose pixels are contiguous inside each row and whose batch/row
// strides are non-negative multiples of the item size (a crop view qualifies).
template <class T>
img::FrameBatch<T> frames_view(const py::array& a, const char* fn) {
  if (a.ndim() != 4)
    throw py::value_error(std::string(fn) + ": frames must have shape (B, H, W, C), got " + shape_str(a));
  const auto item = static_cast<py::ssize_t>(sizeof(T));
  const py::ssize_t c = a.shape(3);
  // An empty batch has no pixels to read (numpy gives it zero strides): it is answered with
  // an empty output, as the numpy reference does.
  const bool ok =
      a.size() == 0 || ((a.shape(3) <= 1 || a.strides(3) == item) && (a.shape(2) <= 1 || a.strides(2) == c * item) &&
                        a.strides(1) >= 0 && a.strides(0) >= 0 && a.strides(1) % item == 0 && a.strides(0) % item == 0);
  if (!ok) {
    throw py::value_error(std::string(fn) +
                          ": frames must have contiguous pixels inside each row and non-negative batch/row "
                          "strides (pass np.ascontiguousarray(frames))");
  }
  img::FrameBatch<T> f;
  f.data = static_cast<const T*>(a.data());
  f.batch = a.shape(0);
  f.height = a.shape(1);
  f.width = a.shape(2);
  f.channels = c;
  f.frame_stride = a.strides(0) / item;
  f.row_stride = a.strides(1) / item;
  return f;
}

// The validated `out` (see bindings.hpp) as a typed pointer.
template <class T>
T* out_data(const py::handle& out_obj, const Shape& shape, const py::array& src, const char* fn) {
  return static_cast<T*>(checked_out(out_obj, py::dtype::of<T>(), shape, fn, &src).mutable_data());
}

void check_size(std::int64_t v, const char* fn, const char* what) {
  if (v < 1) throw py::value_error(std::string(fn) + ": " + what + " must be >= 1, got " + std::to_string(v));
}

void resize(const py::handle& frames_obj, std::int64_t height, std::int64_t width, bool gray, const py::handle& out_obj,
            const py::handle& max_with_obj) {
  const char* fn = gray ? "gray_resize" : "resize";
  const py::array frames = as_array(frames_obj, fn, "frames");
  check_size(height, fn, "height");
  check_size(width, fn, "width");
  if (frames.ndim() == 4 && (frames.shape(1) < 1 || frames.shape(2) < 1 || frames.shape(3) < 1)) {
    throw py::value_error(std::string(fn) + ": frames must have H, W and C >= 1, got shape " + shape_str(frames));
  }
  const bool pooled = !max_with_obj.is_none();
  if (pooled && !is_u8(frames))
    throw py::value_error(std::string(fn) + ": max_with needs uint8 frames, got " + dtype_str(frames));
  if (is_u8(frames)) {
    const auto f = frames_view<std::uint8_t>(frames, fn);
    if (gray && f.channels != 3) {
      throw py::value_error(std::string(fn) + ": frames must have 3 channels (RGB, last axis), got shape " +
                            shape_str(frames));
    }
    img::FrameBatch<std::uint8_t> second;
    py::array max_with;
    if (pooled) {
      max_with = as_array(max_with_obj, fn, "max_with");
      bool same = is_u8(max_with) && max_with.ndim() == 4;
      for (py::ssize_t d = 0; same && d < 4; ++d) same = max_with.shape(d) == frames.shape(d);
      if (!same) {
        throw py::value_error(std::string(fn) + ": max_with must be a uint8 array of the frames' shape " +
                              shape_str(frames) + ", got " + dtype_str(max_with) + " array of shape " +
                              shape_str(max_with));
      }
      second = frames_view<std::uint8_t>(max_with, fn);
    }
    auto* out = out_data<std::uint8_t>(out_obj, {f.batch, height, width, gray ? 1 : f.channels}, frames, fn);
    if (pooled) {
      if (overlaps(py::reinterpret_borrow<py::array>(out_obj), max_with)) {
        throw py::value_error(std::string(fn) + ": out must not overlap max_with");
      }
    }
    if (f.batch == 0) return;  // an empty batch: nothing to compute (no tables for its size)
    py::gil_scoped_release release;
    img::resize_u8(f, height, width, gray, out, pooled ? &second : nullptr);
  } else if (is_f32(frames) && !gray) {
    const auto f = frames_view<float>(frames, fn);
    auto* out = out_data<float>(out_obj, {f.batch, height, width, f.channels}, frames, fn);
    if (f.batch == 0) return;
    py::gil_scoped_release release;
    img::resize_f32(f, height, width, out);
  } else {
    throw py::value_error(std::string(fn) + ": frames must be " + (gray ? "uint8" : "uint8 or float32") + ", got " +
                          dtype_str(frames));
  }
}

void rgb_to_gray(const py::handle& frames_obj, const py::handle& out_obj) {
  const char* fn = "rgb_to_gray";
  const py::array frames = as_array(frames_obj, fn, "frames");
  if (!is_u8(frames)) throw py::value_error(std::string(fn) + ": frames must be uint8, got " + dtype_str(frames));
  const auto f = frames_view<std::uint8_t>(frames, fn);
  if (f.channels != 3)
    throw py::value_error(std::string(fn) + ": frames must have 3 channels (RGB, last axis), got shape " +
                          shape_str(frames));
  auto* out = out_data<std::uint8_t>(out_obj, {f.batch, f.height, f.width, 1}, frames, fn);
  py::gil_scoped_release release;
  img::rgb_to_gray(f, out);
}

void crop(const py::handle& frames_obj, std::int64_t top, std::int64_t left, std::int64_t height, std::int64_t width,
          const py::handle& out_obj) {
  const char* fn = "crop";
  const py::array frames = as_array(frames_obj, fn, "frames");
  if (frames.ndim() != 4)
    throw py::value_error(std::string(fn) + ": frames must have shape (B, H, W, C), got " + shape_str(frames));
  const std::int64_t h = frames.shape(1), w = frames.shape(2), c = frames.shape(3);
  std::int64_t bottom = 0, right = 0;  // top + height, left + width, never wrapped
  if (top < 0 || left < 0 || height < 1 || width < 1 || add_overflows(top, height, bottom) || bottom > h ||
      add_overflows(left, width, right) || right > w) {
    throw py::value_error(std::string(fn) + ": window rows [" + std::to_string(top) + ", " +
                          std::to_string(static_cast<std::uint64_t>(top) + static_cast<std::uint64_t>(height)) +
                          ") x cols [" + std::to_string(left) + ", " +
                          std::to_string(static_cast<std::uint64_t>(left) + static_cast<std::uint64_t>(width)) +
                          ") must be non-empty and inside the " + std::to_string(h) + "x" + std::to_string(w) +
                          " frame");
  }
  const py::ssize_t item = frames.itemsize();
  const bool ok = frames.size() == 0 ||  // an empty batch: nothing to read, an empty output
                  ((c <= 1 || frames.strides(3) == item) && (w <= 1 || frames.strides(2) == c * item) &&
                   frames.strides(0) >= 0 && frames.strides(1) >= 0);
  if (!ok) {
    throw py::value_error(std::string(fn) +
                          ": frames must have contiguous pixels inside each row and non-negative "
                          "batch/row strides (pass np.ascontiguousarray(frames))");
  }
  py::array out = checked_out(out_obj, frames.dtype(), {frames.shape(0), height, width, c}, fn, &frames);
  const std::int64_t pixel_bytes = checked_mul(c, item, "crop: pixel bytes");
  const auto* src = static_cast<const std::uint8_t*>(frames.data()) +
                    checked_mul(top, frames.strides(1), "crop: offset") +
                    checked_mul(left, pixel_bytes, "crop: offset");
  auto* dst = static_cast<std::uint8_t*>(out.mutable_data());
  const std::int64_t batch = frames.shape(0), fs = frames.strides(0), rs = frames.strides(1),
                     row_bytes = checked_mul(width, pixel_bytes, "crop: row bytes");
  py::gil_scoped_release release;
  img::copy_blocks(src, batch, height, row_bytes, fs, rs, dst);
}

void max_last_two(const py::handle& frames_obj, int axis, const py::handle& out_obj) {
  const char* fn = "max_last_two";
  const py::array frames = as_array(frames_obj, fn, "frames");
  if (axis < 0 || axis >= frames.ndim()) {
    throw py::value_error(std::string(fn) + ": axis must be in [0, " + std::to_string(frames.ndim()) + "), got " +
                          std::to_string(axis));
  }
  if (frames.shape(axis) < 2) {
    throw py::value_error(std::string(fn) + ": frames need at least 2 entries along axis " + std::to_string(axis) +
                          ", got shape " + shape_str(frames));
  }
  if (!(frames.flags() & py::array::c_style)) throw py::value_error(std::string(fn) + ": frames must be C-contiguous");
  std::vector<std::int64_t> shape;
  std::int64_t outer = 1, inner = 1;
  for (py::ssize_t d = 0; d < frames.ndim(); ++d) {
    if (d < axis) outer = checked_mul(outer, frames.shape(d), "max_last_two: frames size");
    if (d > axis) inner = checked_mul(inner, frames.shape(d), "max_last_two: frames size");
    if (d != axis) shape.push_back(frames.shape(d));
  }
  const std::int64_t t = frames.shape(axis);
  if (is_u8(frames)) {
    auto* out = out_data<std::uint8_t>(out_obj, shape, frames, fn);
    const auto* src = static_cast<const std::uint8_t*>(frames.data());
    py::gil_scoped_release release;
    img::max_last_two(src, outer, t, inner, out);
  } else if (is_f32(frames)) {
    auto* out = out_data<float>(out_obj, shape, frames, fn);
    const auto* src = static_cast<const float*>(frames.data());
    py::gil_scoped_release release;
    img::max_last_two(src, outer, t, inner, out);
  } else {
    throw py::value_error(std::string(fn) + ": frames must be uint8 or float32, got " + dtype_str(frames));
  }
}

void generic_pixel(const py::handle& frames_obj, std::int64_t dim, bool grayscale, bool zero_mean,
                   const py::handle& out_obj) {
  const char* fn = "generic_pixel";
  const py::array frames = as_array(frames_obj, fn, "frames");
  check_size(dim, fn, "dim");
  if (frames.ndim() != 4 || frames.shape(1) <= 2 * img::kGenericCrop || frames.shape(2) < 1 || frames.shape(3) != 3) {
    throw py::value_error(std::string(fn) + ": frames must have shape (B, H, W, 3) with H > 50, got " +
                          shape_str(frames));
  }
  const std::vector<std::int64_t> shape{frames.shape(0), dim, dim, grayscale ? 1 : 3};
  if (is_u8(frames)) {
    const auto f = frames_view<std::uint8_t>(frames, fn);
    auto* out = out_data<float>(out_obj, shape, frames, fn);
    if (f.batch == 0) return;
    py::gil_scoped_release release;
    img::generic_pixel_u8(f, dim, grayscale, zero_mean, out);
  } else if (is_f32(frames)) {
    const auto f = frames_view<float>(frames, fn);
    auto* out = out_data<float>(out_obj, shape, frames, fn);
    if (f.batch == 0) return;
    py::gil_scoped_release release;
    img::generic_pixel_f32(f, dim, grayscale, zero_mean, out);
  } else {
    throw py::value_error(std::string(fn) + ": frames must be uint8 or float32, got " + dtype_str(frames));
  }
}

// (B, H, W) uint8 palette-index screens with contiguous rows (batch stride free).
palette::IndexBatch index_view(const py::array& a, const char* fn, const char* what) {
  if (!is_u8(a) || a.ndim() != 3 || a.shape(1) < 1 || a.shape(2) < 1) {
    throw py::value_error(std::string(fn) + ": " + what + " must be a uint8 array of shape (B, H, W), got " +
                          dtype_str(a) + " array of shape " + shape_str(a));
  }
  const bool ok =
      a.size() == 0 ||  // an empty batch: nothing to read, an empty output
      ((a.shape(2) <= 1 || a.strides(2) == 1) && (a.shape(1) <= 1 || a.strides(1) == a.shape(2)) && a.strides(0) >= 0);
  if (!ok)
    throw py::value_error(std::string(fn) + ": " + what + " must have contiguous frames (pass np.ascontiguousarray)");
  palette::IndexBatch b;
  b.data = static_cast<const std::uint8_t*>(a.data());
  b.batch = a.shape(0);
  b.height = a.shape(1);
  b.width = a.shape(2);
  b.frame_stride = a.strides(0);
  return b;
}

const std::uint8_t* table_view(const py::handle& obj, const char* fn, const char* what, py::ssize_t cols) {
  const py::array t = as_array(obj, fn, what);
  const bool shape_ok =
      cols == 0 ? (t.ndim() == 1 && t.shape(0) == 256) : (t.ndim() == 2 && t.shape(0) == 256 && t.shape(1) == cols);
  if (!is_u8(t) || !shape_ok || !(t.flags() & py::array::c_style)) {
    throw py::value_error(std::string(fn) + ": " + what + " must be a C-contiguous uint8 array of shape " +
                          (cols == 0 ? std::string("(256,)") : "(256, " + std::to_string(cols) + ")") + ", got " +
                          dtype_str(t) + " array of shape " + shape_str(t));
  }
  return static_cast<const std::uint8_t*>(t.data());
}

void palette_resize(const py::handle& index_obj, const py::handle& palette_obj, std::int64_t height, std::int64_t width,
                    bool gray, const py::handle& out_obj, const py::handle& max_with_obj) {
  const char* fn = "palette_resize";
  const py::array index = as_array(index_obj, fn, "index");
  check_size(height, fn, "height");
  check_size(width, fn, "width");
  palette::IndexBatch src = index_view(index, fn, "index");
  const std::uint8_t* pal = table_view(palette_obj, fn, "palette", 3);
  py::array second;
  if (!max_with_obj.is_none()) {
    second = as_array(max_with_obj, fn, "max_with");
    const palette::IndexBatch s = index_view(second, fn, "max_with");
    if (s.batch != src.batch || s.height != src.height || s.width != src.width) {
      throw py::value_error(std::string(fn) + ": max_with must have the index screens' shape " + shape_str(index) +
                            ", got " + shape_str(second));
    }
    src.second = s.data;
    src.second_stride = s.frame_stride;
  }
  auto* out = out_data<std::uint8_t>(out_obj, {src.batch, height, width, gray ? 1 : 3}, index, fn);
  if (overlaps(py::reinterpret_borrow<py::array>(out_obj), py::reinterpret_borrow<py::array>(palette_obj))) {
    throw py::value_error(std::string(fn) + ": out must not overlap palette");
  }
  if (src.second != nullptr) {
    if (overlaps(py::reinterpret_borrow<py::array>(out_obj), second)) {
      throw py::value_error(std::string(fn) + ": out must not overlap max_with");
    }
  }
  if (src.batch == 0) return;  // an empty batch: nothing to compute
  py::gil_scoped_release release;
  palette::resize_u8(src, pal, height, width, gray, out);
}

bool palette_unknown(const py::handle& index_obj, const py::handle& known_obj) {
  const char* fn = "palette_unknown";
  const py::array index = as_array(index_obj, fn, "index");
  if (!is_u8(index) || !(index.flags() & py::array::c_style)) {
    throw py::value_error(std::string(fn) + ": index must be a C-contiguous uint8 array, got " + dtype_str(index) +
                          (index.flags() & py::array::c_style ? "" : " (non-contiguous)"));
  }
  const std::uint8_t* known = table_view(known_obj, fn, "known", 0);
  const auto* data = static_cast<const std::uint8_t*>(index.data());
  const auto n = static_cast<std::int64_t>(index.size());
  py::gil_scoped_release release;
  return palette::has_unknown(data, n, known);
}

}  // namespace

void register_image(py::module_& m) {
  m.def(
      "check_out",
      [](const py::handle& out, const py::dtype& dtype, const Shape& shape, const py::array& input,
         const std::string& fn) { return checked_out(out, dtype, shape, fn, &input); },
      py::arg("out"), py::arg("dtype"), py::arg("shape"), py::arg("input"), py::arg("fn"),
      "out, validated as every kernel validates its out= argument (writeable, C-contiguous, exact dtype and "
      "shape, not overlapping input); ValueError naming fn otherwise.");
  m.def("image_resize", &resize, py::arg("frames"), py::arg("height"), py::arg("width"), py::arg("gray"),
        py::arg("out"), py::arg("max_with") = py::none(),
        "INTER_AREA resize of (B, H, W, C) frames into out; gray fuses RGB->gray (uint8 only); max_with "
        "(uint8, same shape) is max-pooled with the frames first.");
  m.def("image_rgb_to_gray", &rgb_to_gray, py::arg("frames"), py::arg("out"),
        "OpenCV fixed-point RGB->gray of (B, H, W, 3) uint8 frames into out (B, H, W, 1).");
  m.def("image_crop", &crop, py::arg("frames"), py::arg("top"), py::arg("left"), py::arg("height"), py::arg("width"),
        py::arg("out"), "Copies a window of (B, H, W, C) frames into out.");
  m.def("image_max_last_two", &max_last_two, py::arg("frames"), py::arg("axis"), py::arg("out"),
        "Element-wise max of the last two entries along axis.");
  m.def("image_generic_pixel", &generic_pixel, py::arg("frames"), py::arg("dim"), py::arg("grayscale"),
        py::arg("zero_mean"), py::arg("out"), "RLlib GenericPixelPreprocessor maths (float32 out).");
  m.def("image_palette_resize", &palette_resize, py::arg("index"), py::arg("palette"), py::arg("height"),
        py::arg("width"), py::arg("gray"), py::arg("out"), py::arg("max_with") = py::none(),
        "INTER_AREA resize (gray fused if gray) of (B, H, W) palette-index screens expanded through a "
        "(256, 3) uint8 RGB palette; max_with (same shape) is max-pooled in RGB first.");
  m.def("image_palette_unknown", &palette_unknown, py::arg("index"), py::arg("known"),
        "Whether the uint8 index array holds an index i with known[i] == 0 (known: (256,) uint8).");
  m.def(
      "_image_allow_simd", [](bool allowed) { return img::detail::simd_allowed().exchange(allowed); },
      py::arg("allowed"),
      "Allows or forbids the AVX2 image paths (for tests: both paths compute the same integers); "
      "returns the previous setting.");
}

}  // namespace rlblocks::bindings
