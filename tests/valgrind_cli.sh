#!/usr/bin/env bash
# normgrad-cli's paths under valgrind memcheck: run (the example, a malformed file, a missing
# device), inspect (a good and a malformed file), devices, cache list, bench refused for size,
# and usage errors. Each must exit with its documented code and valgrind must report no error and no
# leak outside PoCL/LLVM/ICD frames (tests/valgrind.supp; normgrad's own frames are never
# suppressed).
#   tests/valgrind_cli.sh NORMGRAD_CLI SOURCE_DIR WORK_DIR
# Exit 77 (CTest: skipped) when valgrind is not installed.
set -uo pipefail
cli="$1" src="$2" work="$3"
if ! command -v valgrind >/dev/null 2>&1; then
  echo "valgrind is not installed: skipped (tools/install-deps.sh installs it)"
  exit 77
fi
mkdir -p "$work"
tmp=$(mktemp -d "$work/valgrind-cli.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
example="$src/tests/data/rmsnorm_example.safetensors"

# Valgrind's CPUID hides AVX-512, so PoCL would pick another CPU and kernel library and compile
# every kernel again, under valgrind (a quarter of an hour). Pin both to ones valgrind runs
# (AVX2) and fill PoCL's cache with them once, natively: the valgrind runs then find every
# program in the cache.
export POCL_LLVM_CPU_NAME=${POCL_LLVM_CPU_NAME:-haswell} POCL_KERNELLIB_NAME=${POCL_KERNELLIB_NAME:-avx2}
export POCL_CACHE_DIR=${POCL_CACHE_DIR:-$work/pocl-cache-valgrind}
"$cli" run rmsnorm --in "$example" --out "$tmp/warm.safetensors" >/dev/null ||
  { echo "FAIL: warm-up run (without valgrind) failed"; exit 1; }
rm -f "$tmp/warm.safetensors"
head -c 200 "$example" >"$tmp/truncated.safetensors"

failed=0 n=0
# run_vg WANT_EXIT LABEL ARGS...   (with the environment assignments in the array `envs`)
run_vg() {
  local want="$1" label="$2"
  shift 2
  n=$((n + 1))
  local log="$tmp/vg-$n.log" t0=$SECONDS
  env "${envs[@]}" valgrind --error-exitcode=99 --leak-check=full \
    --errors-for-leak-kinds=definite,possible --show-leak-kinds=definite,possible \
    --num-callers=40 --suppressions="$src/tests/valgrind.supp" --log-file="$log" \
    "$cli" "$@" >"$tmp/out-$n.txt" 2>&1
  local rc=$?
  if [ "$rc" -ne "$want" ]; then
    failed=$((failed + 1))
    echo "FAIL ($((SECONDS - t0)) s): $label: exit $rc, expected $want"
    [ "$rc" -eq 99 ] && grep -v '^==[0-9]*== *$' "$log" | sed -n '1,200p'
    sed -n '1,20p' "$tmp/out-$n.txt"
  else
    echo "ok   ($((SECONDS - t0)) s): $label (exit $rc, $(grep -o 'ERROR SUMMARY: [0-9]* errors' "$log"))"
  fi
}

envs=()
run_vg 0 "run rmsnorm on the example" run rmsnorm --in "$example" --out "$tmp/out.safetensors"
[ -s "$tmp/out.safetensors" ] || { echo "FAIL: no output written"; failed=$((failed + 1)); }
run_vg 2 "run rmsnorm on a truncated file" run rmsnorm --in "$tmp/truncated.safetensors" \
  --out "$tmp/bad-out.safetensors"
[ -e "$tmp/bad-out.safetensors" ] && { echo "FAIL: output written"; failed=$((failed + 1)); }
run_vg 0 "inspect the example" inspect "$example"
run_vg 2 "inspect a truncated file" inspect "$tmp/truncated.safetensors"
run_vg 0 "devices" devices
run_vg 0 "cache list (the entries the runs above stored)" cache list
run_vg 2 "usage error: --eps nan" run rmsnorm --in "$example" --out "$tmp/x.safetensors" --eps nan
run_vg 2 "usage error: unknown subcommand" frobnicate
run_vg 3 "bench beyond the device's largest allocation" bench rmsnorm --rows 1048576 \
  --hidden 1048576 --dtype bf16
envs=(NORMGRAD_DEVICE=nonexistent)
run_vg 2 "run with NORMGRAD_DEVICE=nonexistent" run rmsnorm --in "$example" \
  --out "$tmp/y.safetensors"
[ -e "$tmp/x.safetensors" ] || [ -e "$tmp/y.safetensors" ] &&
  { echo "FAIL: a failed run wrote its output"; failed=$((failed + 1)); }

echo "$n runs under valgrind, $failed failed"
[ "$failed" -eq 0 ]
