#!/usr/bin/env bash
# The long differential fuzzing run: the native core against its numpy twin, each in its own
# subprocess, over CASES random spaces (default 50,000, from seed 100,000 so it does not
# repeat CI's slice) under AddressSanitizer + UndefinedBehaviorSanitizer.
# Usage: bash tools/fuzz.sh [CASES] [FIRST_SEED]
set -euo pipefail
exec bash "$(dirname "$0")/asan_check.sh" --fuzz --cases "${1:-50000}" --seed "${2:-100000}" --jobs 2
