#!/usr/bin/env bash
# Builds rlblocks._core with AddressSanitizer in a scratch copy of the tree and runs every
# test that drives the native kernels under it: any out-of-bounds read or write fails.
# Usage: bash tools/asan_check.sh   (needs g++ with libasan; run by .ci/run)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
asan=$(g++ -print-file-name=libasan.so)
stdcxx=$(g++ -print-file-name=libstdc++.so)
if [ ! -e "$asan" ]; then
  echo "asan_check: libasan not available for $(g++ --version | head -1); skipped" >&2
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$root/cpp" "$root/python" "$root/tests" "$root/CMakeLists.txt" "$root/pyproject.toml" "$work/"
rm -f "$work"/python/rlblocks/_core*.so
cmake -S "$work" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS="-fsanitize=address -fno-omit-frame-pointer" \
  -DCMAKE_MODULE_LINKER_FLAGS="-fsanitize=address" > "$work/cmake.log"
cmake --build "$work/build" > "$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
cd "$work"
# libstdc++ is preloaded too so that ASan can intercept C++ exceptions (our ValueErrors).
LD_PRELOAD="$asan $stdcxx" ASAN_OPTIONS="detect_leaks=0:abort_on_error=1" PYTHONPATH="$work/python" \
  python -m pytest -q -p no:cacheprovider -o addopts="" \
  tests/test_preprocessors.py tests/test_bad_input.py tests/test_restore.py tests/test_filters.py \
  tests/test_framestack.py tests/test_image.py tests/test_sequences.py tests/test_tanh_kernel.py
