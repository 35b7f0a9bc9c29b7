// Checked size arithmetic: the one place where element counts, byte counts and offsets are
// added and multiplied.
//
// Every size that reaches a kernel (a flatten offset, batch * row size, an image's
// B * H * W * C, a frame stack's num_envs * k * frame bytes, a filter's shape product, a
// sequence batch's num_seq * max_seq_len) is computed here. A result that leaves
// [0, INT64_MAX] is never wrapped: the *_overflows forms report it, the checked_* forms
// throw SizeError, which pybind11 turns into a Python ValueError (std::length_error maps to
// ValueError) whose message names the quantity, the operands and the limit.
//
// Pure C++17, no pybind11: the kernels include it too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

namespace rlblocks {

// A size, offset or count that does not fit int64 (or a narrower type that stores it).
class SizeError : public std::length_error {
 public:
  using std::length_error::length_error;
};

// r = a + b; true (r unspecified) when the exact sum is not representable in int64.
inline bool add_overflows(std::int64_t a, std::int64_t b, std::int64_t& r) {
#if defined(__GNUC__) || defined(__clang__)
  return __builtin_add_overflow(a, b, &r);
#else
  constexpr std::int64_t hi = std::numeric_limits<std::int64_t>::max(), lo = std::numeric_limits<std::int64_t>::min();
  if ((b > 0 && a > hi - b) || (b < 0 && a < lo - b)) return true;
  r = a + b;
  return false;
#endif
}

// r = a * b; true (r unspecified) when the exact product is not representable in int64.
inline bool mul_overflows(std::int64_t a, std::int64_t b, std::int64_t& r) {
#if defined(__GNUC__) || defined(__clang__)
  return __builtin_mul_overflow(a, b, &r);
#else
  constexpr std::int64_t hi = std::numeric_limits<std::int64_t>::max(), lo = std::numeric_limits<std::int64_t>::min();
  if (a == 0 || b == 0) {
    r = 0;
    return false;
  }
  const bool overflow = a > 0 ? (b > 0 ? a > hi / b : b < lo / a) : (b > 0 ? a < lo / b : a != 0 && b < hi / a);
  if (!overflow) r = a * b;
  return overflow;
#endif
}

namespace detail {
[[noreturn]] inline void size_overflow(const char* what, const std::string& expr) {
  throw SizeError(std::string(what) + ": " + expr + " does not fit in int64 (the largest size is " +
                  std::to_string(std::numeric_limits<std::int64_t>::max()) + ")");
}
}  // namespace detail

// a + b for sizes and offsets; SizeError naming `what` and the operands on overflow.
inline std::int64_t checked_add(std::int64_t a, std::int64_t b, const char* what) {
  std::int64_t r;
  if (add_overflows(a, b, r)) detail::size_overflow(what, std::to_string(a) + " + " + std::to_string(b));
  return r;
}

// a * b for sizes; SizeError naming `what` and the operands on overflow.
inline std::int64_t checked_mul(std::int64_t a, std::int64_t b, const char* what) {
  std::int64_t r;
  if (mul_overflows(a, b, r)) detail::size_overflow(what, std::to_string(a) + " * " + std::to_string(b));
  return r;
}

// The product of n dimensions (1 for n == 0). Negative dimensions are the caller's to
// refuse. A zero dimension makes the product 0, but the product of the other dimensions
// must still fit (as numpy requires of a shape), so no overflow hides behind a zero.
template <class Int>
inline std::int64_t checked_product(const Int* dims, std::size_t n, const char* what) {
  std::int64_t r = 1;
  bool zero = false, overflow = false;
  for (std::size_t i = 0; i < n; ++i) {
    const auto d = static_cast<std::int64_t>(dims[i]);
    if (d == 0) zero = true;
    else if (!overflow && mul_overflows(r, d, r)) overflow = true;
  }
  if (overflow) {  // the message is built only here: the loop above is on hot paths
    std::string expr;
    for (std::size_t i = 0; i < n; ++i) expr += (i ? " * " : "") + std::to_string(static_cast<std::int64_t>(dims[i]));
    detail::size_overflow(what, expr);
  }
  return zero ? 0 : r;
}

template <class Container>
inline std::int64_t checked_product(const Container& dims, const char* what) {
  return checked_product(dims.data(), dims.size(), what);
}

// v as a narrower integer type (e.g. an int32 element count); SizeError when it does not fit.
template <class Narrow>
inline Narrow checked_narrow(std::int64_t v, const char* what) {
  if (v < static_cast<std::int64_t>(std::numeric_limits<Narrow>::min()) ||
      v > static_cast<std::int64_t>(std::numeric_limits<Narrow>::max())) {
    throw SizeError(std::string(what) + ": " + std::to_string(v) + " does not fit (allowed " +
                    std::to_string(std::numeric_limits<Narrow>::min()) + ".." +
                    std::to_string(std::numeric_limits<Narrow>::max()) + ")");
  }
  return static_cast<Narrow>(v);
}

}  // namespace rlblocks
