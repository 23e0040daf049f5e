#!/usr/bin/env bash
# Installs normgrad's build and test dependencies from Debian's packages (bookworm or later).
# Does nothing when they are all present; uses sudo when not run as root.
set -euo pipefail
pkgs=(build-essential cmake pkg-config ocl-icd-opencl-dev opencl-c-headers pocl-opencl-icd
      libclblast-dev libcmocka-dev libcjson-dev
      valgrind clang libclang-rt-dev  # memcheck of the CLI; libFuzzer (tests/fuzz)
      openmpi-bin libopenmpi-dev      # examples/data_parallel_step.c and its 2-rank test
      python3)                        # the checks of tests/cli/tune.sh, ab_bench.sh, plot_bench.sh
                                      # and bench_sweep.sh
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
