#!/usr/bin/env bash
# README command 1: install dependencies, build, and run one RMSNorm forward + backward on the
# default OpenCL device (first GPU, else first device; NORMGRAD_DEVICE selects another).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
./build/normgrad-cli devices
out="${TMPDIR:-/tmp}/normgrad-rmsnorm-out.safetensors"
./build/normgrad-cli run rmsnorm --in tests/data/rmsnorm_example.safetensors --out "$out"
./build/normgrad-cli inspect "$out"
