#!/usr/bin/env bash
# Runs normgrad-cli bench over ops × N × pass × frozen at rows·N = TOTAL (default 2^25, i.e.
# 64 MiB per bf16 tensor, past a 50 MB L2), and the PyTorch peers where PyTorch has a GPU.
# Writes JSON lines to OUT (default bench.jsonl) and prints a ratio table.
#   tools/bench_sweep.sh [--cli PATH] [--ops "rmsnorm layernorm"] [--ns "1024 4096"]
#                        [--dtype bf16] [--total N] [--out FILE] [--no-torch]
set -euo pipefail
cli=./build/normgrad-cli ops="rmsnorm" ns="1024 2048 4096 8192 16384 32768 65536"
dtype=bf16 total=$((1 << 25)) out=bench.jsonl torch=1
while [ $# -gt 0 ]; do
  case "$1" in
    --cli) cli=$2; shift 2 ;; --ops) ops=$2; shift 2 ;; --ns) ns=$2; shift 2 ;;
    --dtype) dtype=$2; shift 2 ;; --total) total=$2; shift 2 ;; --out) out=$2; shift 2 ;;
    --no-torch) torch=0; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
here=$(cd "$(dirname "$0")" && pwd)
: > "$out"
for op in $ops; do
  for n in $ns; do
    rows=$((total / n))
    for pass in forward backward; do
      for fr in "" "--freeze-weight"; do
        [ "$pass" = forward ] && [ -n "$fr" ] && continue
        "$cli" bench "$op" --rows "$rows" --hidden "$n" --dtype "$dtype" --pass "$pass" $fr --json >> "$out" || echo "{\"op\":\"$op\",\"hidden\":$n,\"pass\":\"$pass\",\"error\":true}" >> "$out"
      done
    done
    if [ "$torch" = 1 ] && python3 -c 'import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
      for fr in "" "--freeze-weight"; do
        python3 "$here/bench_torch.py" --op "$op" --rows "$rows" --hidden "$n" --dtype "$dtype" $fr >> "$out" || true
      done
    fi
  done
done
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(f"{'impl':14} {'op':18} {'pass':9} {'N':>6} {'frozen':6} {'ms':>9} {'GB/s':>8} {'copy':>7} {'ratio':>6}")
for r in rows:
    if "error" in r or "skipped" in r: print(r); continue
    print(f"{r.get('impl','normgrad'):14} {r['op']:18} {r['pass']:9} {r['hidden']:>6} {str(r['frozen']):6} "
          f"{r['median_ms']:9.4f} {r['gbps']:8.1f} {r['copy_gbps']:7.0f} {r['ratio']:6.3f}")
PY
