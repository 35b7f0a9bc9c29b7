// SIMD dispatch, in one place: whether AVX2 / AVX-512 code paths are compiled, and whether
// the CPU that runs the module has the instructions.
//
// The vector kernels are compiled per function (`__attribute__((target("avx2")))`) and
// chosen at run time with `__builtin_cpu_supports`, both GCC/Clang features: with those
// compilers on x86 RLBLOCKS_X86 is 1; elsewhere (MSVC, ARM) it is 0 and only the portable
// loops exist.
#pragma once

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
#define RLBLOCKS_X86 1
#include <immintrin.h>
#else
#define RLBLOCKS_X86 0
#endif

namespace rlblocks::simd {

#if RLBLOCKS_X86
inline bool cpu_has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2") != 0;
  return has;
}
inline bool cpu_has_avx2_fma() {
  static const bool has = cpu_has_avx2() && __builtin_cpu_supports("fma") != 0;
  return has;
}
inline bool cpu_has_avx512bw() {
  static const bool has = __builtin_cpu_supports("avx512f") != 0 && __builtin_cpu_supports("avx512bw") != 0;
  return has;
}
#else
inline bool cpu_has_avx2() { return false; }
inline bool cpu_has_avx2_fma() { return false; }
inline bool cpu_has_avx512bw() { return false; }
#endif

}  // namespace rlblocks::simd
