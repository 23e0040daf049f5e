#!/usr/bin/env bash
# Runs every test binary of a build directly (no CTest needed) on the default device — or the one
# NORMGRAD_DEVICE names — then the benchmark sweep of every op and the PyTorch round trip where
# PyTorch is installed. For checking a GPU machine that has only the build's runtime libraries.
#   tools/device_check.sh BUILD_DIR OUT_DIR [--quick]
set -uo pipefail
build=${1:?build dir} out=${2:?out dir} quick=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
mkdir -p "$out"
export NORMGRAD_CLI="$build/normgrad-cli" NORMGRAD_TEST_DATA="$root/tests/data"
export NORMGRAD_CACHE_DIR="$out/program-cache"
fails=0
for t in "$build"/tests/test_*; do
  [ -x "$t" ] || continue
  name=$(basename "$t")
  start=$(date +%s)
  if "$t" > "$out/$name.log" 2>&1; then r=ok; else r=FAIL; fails=$((fails + 1)); fi
  echo "$name: $r ($(( $(date +%s) - start )) s)"
done
[ -n "$quick" ] && exit $fails
"$here/bench_sweep.sh" --cli "$build/normgrad-cli" --no-torch --out "$out/sweep.jsonl" \
  --ops "rmsnorm fused-add-rmsnorm layernorm groupnorm polynorm" > "$out/sweep.txt" 2>&1
tail -n +1 "$out/sweep.txt" | awk 'NR==1 || /backward|forward/' | cut -c1-100
for fr in "" "--freeze-weight"; do
  "$build/normgrad-cli" bench flce --rows 8192 --hidden 4096 --vocab 32000 --dtype bf16 $fr --json >> "$out/flce.jsonl" 2>> "$out/flce.err"
done
cat "$out/flce.jsonl"
python3 "$here/torch_interop.py" --cli "$build/normgrad-cli" > "$out/interop.txt" 2>&1; tail -3 "$out/interop.txt"
exit $fails
