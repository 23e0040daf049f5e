#!/usr/bin/env bash
# README command 2: install dependencies, build, and run the whole test suite.
#   tools/test.sh [BUILD_DIR] [extra cmake options…]
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-build}"
[ $# -gt 0 ] && shift
tools/install-deps.sh
cmake -S . -B "$dir" -DNG_WERROR=ON "$@" >/dev/null
cmake --build "$dir" -j"$(nproc)"
ctest --test-dir "$dir" --output-on-failure -j"$(nproc)"
