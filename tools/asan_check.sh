#!/usr/bin/env bash
# Builds rlblocks._core with AddressSanitizer and UndefinedBehaviorSanitizer (at -O1, as the
# sanitizers advise: half the -O3 build time) in a scratch copy of the tree and runs the tests
# marked `native` but not `ray` (pytest -m "native and not ray") under them, and the
# differential fuzzer (tools/fuzz_flatten.py, RLBLOCKS_FUZZ_CASES cases): any out-of-bounds
# read or write, use after free or undefined behaviour (signed overflow, bad shifts,
# misaligned loads) fails.
# Usage: bash tools/asan_check.sh             the tests (needs g++ with libasan and libubsan)
#        bash tools/asan_check.sh --fuzz ARGS  only the fuzzer (tools/fuzz.sh)
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
cp -r "$root/cpp" "$root/python" "$root/tests" "$root/tools" "$root/CMakeLists.txt" "$root/pyproject.toml" "$work/"
rm -f "$work"/python/rlblocks/_core*.so
# -g1: line tables only (file:line in the sanitizers' reports), a tenth less CPU than -g
cmake -S "$work" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRLBLOCKS_OPT=-O1 \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-g1 -DNDEBUG" \
  -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
  -DCMAKE_MODULE_LINKER_FLAGS="-fsanitize=address,undefined" > "$work/cmake.log"
cmake --build "$work/build" > "$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
cd "$work"
# libstdc++ is preloaded too so that ASan can intercept C++ exceptions (our ValueErrors).
sanitized() {
  LD_PRELOAD="$asan $stdcxx" ASAN_OPTIONS="detect_leaks=0:abort_on_error=1" \
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" PYTHONPATH="$work/python" "$@"
}
# An editable install's import hook runs before PYTHONPATH: the tests would then load the
# unsanitized build and prove nothing.
sanitized python -c "import rlblocks._core as c, sys; sys.exit(0 if c.__file__.startswith('$work/') else \
'asan_check: rlblocks._core loads from ' + c.__file__ + ', not the sanitized build (an editable install shadows PYTHONPATH)')"
if [ "${1:-}" = "--fuzz" ]; then  # only the fuzzer, with its own arguments (tools/fuzz.sh)
  shift
  sanitized python tools/fuzz_flatten.py "$@"
  exit
fi
# The tests marked `native` (pyproject.toml markers; tests/test_markers.py keeps every module that
# reaches rlblocks._core marked), tests/test_fuzz.py among them, less those that need Ray: they
# reach the same kernels (the connectors' flattening, the replay ring) through Ray's processes,
# which run sanitized too and cost minutes. Only the files that use the marker are collected,
# so that the heavy training modules are not imported under ASan.
mapfile -t native_files < <(grep -rlE 'pytest\.mark\.native' tests --include='test_*.py' | sort)
RLBLOCKS_FUZZ_CASES="${RLBLOCKS_FUZZ_CASES:-1500}" sanitized python -m pytest -q -p no:cacheprovider -o addopts="" \
  -m "native and not ray" "${native_files[@]}"
