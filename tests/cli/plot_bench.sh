#!/usr/bin/env bash
# tools/plot_bench.py --summary on made-up sweep lines: --median keeps normgrad's median run,
# --fastest-peers pools other runs' peer lines (not their normgrad lines) and keeps each peer's
# fastest time per cell, GroupNorm lines from before the "groups" field meet the newer lines of
# the same cell, a peer meets normgrad only in the same frozen setting and dtype, and the summary
# ends with the least speedups. It checks the script, never a speed.
# Usage: plot_bench.sh [normgrad-cli] (the CLI is not used).
set -u
PB="$(dirname "$0")/../../tools/plot_bench.py"
. "$(dirname "$0")/common.bash"
ng_cli_test_setup plot_bench

# line IMPL OP PASS FROZEN MS [GROUPS [DTYPE]]: one timed JSON line (rows 64, N 1024, bf16 unless
# DTYPE); FROZEN 0, 1 (the weight) or 2 (the weight and bias); GROUPS "-" leaves the field out, as
# sweeps before it did
line() {
  python3 - "$@" <<'PY'
import json, sys
impl, op, pas, frozen, ms = sys.argv[1:6]
r = {"op": op, "pass": pas, "rows": 64, "hidden": 1024,
     "dtype": sys.argv[7] if len(sys.argv) > 7 else "bf16",
     "frozen": frozen != "0", "frozen_bias": frozen == "2", "bytes": 1000000,
     "median_ms": float(ms), "gbps": 1.0 / float(ms), "copy_gbps": 2.0, "ratio": 0.5 / float(ms)}
if impl != "normgrad":
    r["impl"] = impl
if len(sys.argv) > 6 and sys.argv[6] != "-":
    r["groups"] = int(sys.argv[6])
print(json.dumps(r))
PY
}

# three sweeps of normgrad: the medians are 1.1 (forward) and 2.2 (backward)
for ms in "1.0 2.4" "1.2 2.0" "1.1 2.2"; do
  set -- $ms
  { line normgrad rmsnorm forward 0 "$1"; line normgrad rmsnorm backward 0 "$2"; } >>"$T/sweeps.jsonl"
done
line normgrad rmsnorm backward 1 1.5 >>"$T/sweeps.jsonl"
line normgrad rmsnorm backward 2 1.3 >>"$T/sweeps.jsonl"
line normgrad layernorm forward 0 0.5 - f16 >>"$T/sweeps.jsonl"
line normgrad groupnorm forward 0 1.0 32 >>"$T/sweeps.jsonl"
# run A: peers and a normgrad line of its own, which --fastest-peers must leave out
{
  line normgrad rmsnorm forward 0 0.1
  line torch-eager rmsnorm forward 0 5.0
  line torch-eager rmsnorm backward 0 8.0
  line torch-eager rmsnorm both 0 13.0
  line liger rmsnorm forward 0 3.3
  line torch-eager groupnorm forward 0 4.0 32
  line torch-eager rmsnorm backward 1 6.0
  line torch-eager rmsnorm backward 2 2.73
  line torch-eager layernorm forward 0 4.5 - f16
  line liger layernorm forward 0 1.0
} >"$T/a.jsonl"
# run B: a faster Liger forward, a torch.compile forward + backward, an old GroupNorm line
{
  line liger rmsnorm forward 0 2.2
  line torch-compile rmsnorm both 0 7.26
  line torch-eager groupnorm forward 0 3.0 -
} >"$T/b.jsonl"

expect 0 python3 "$PB" --summary --median "$T/sweeps.jsonl" --fastest-peers "$T/a.jsonl" "$T/b.jsonl"
# column 5: the frozen setting, column 7: the best peer, column 9: the speedup
sp() { awk -v op="$1" -v p="$2" -v f="$3" '$1 == op && $2 == p && $5 == f { print $7, $9 }' "$T/out"; }
[ "$(sp rmsnorm forward False)" = "liger 2.00x" ] || fail "forward: $(sp rmsnorm forward False)"
[ "$(sp rmsnorm backward False)" = "torch-eager 3.64x" ] || fail "backward: $(sp rmsnorm backward False)"
# normgrad's forward + backward is the sum of its medians, 3.3 ms
[ "$(sp rmsnorm both False)" = "torch-compile 2.20x" ] || fail "both: $(sp rmsnorm both False)"
[ "$(sp groupnorm forward False)" = "torch-eager 3.00x" ] || fail "groupnorm: $(sp groupnorm forward False)"
# the weight frozen and every parameter frozen are cells of their own (until 2026-11-28 a peer's
# both-frozen line met normgrad's weight-frozen one and hid it), and so are dtypes
[ "$(sp rmsnorm backward True)" = "torch-eager 4.00x" ] || fail "frozen: $(sp rmsnorm backward True)"
[ "$(sp rmsnorm backward all)" = "torch-eager 2.10x" ] || fail "all frozen: $(sp rmsnorm backward all)"
[ "$(sp layernorm forward False)" = "torch-eager 9.00x" ] || fail "f16: $(sp layernorm forward False)"
has "least speedup, every pass: 2.00x (rmsnorm forward N=1024 bf16, beside liger)" out
has "least speedup, forward + backward: 2.20x (rmsnorm both N=1024 bf16, beside torch-compile)" out

# without --fastest-peers every file is one more run: run A's normgrad line joins the median
# (0.1, 1.0, 1.1, 1.2: the faster middle one, 1.0) and its peers are the only ones
expect 0 python3 "$PB" --summary --median "$T/sweeps.jsonl" "$T/a.jsonl"
[ "$(sp rmsnorm forward False)" = "liger 3.30x" ] || fail "one run: $(sp rmsnorm forward False)"

# the CSV takes the same rows (the PNGs need matplotlib, which the test does not ask for)
expect 0 python3 "$PB" --median "$T/sweeps.jsonl" --fastest-peers "$T/a.jsonl" "$T/b.jsonl" \
  --out-dir "$T/plots" --prefix t
python3 - "$T/plots/t.csv" <<'PY' || fail "CSV"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
got = sorted((r["impl"], r["op"], r["pass"], r["dtype"], r["frozen"] + "/" + r["frozen_bias"],
              r["median_ms"]) for r in rows)
no, w, wb = "False/False", "True/False", "True/True"
want = sorted([
    ("normgrad", "rmsnorm", "forward", "bf16", no, "1.1"),
    ("normgrad", "layernorm", "forward", "f16", no, "0.5"),
    ("normgrad", "rmsnorm", "backward", "bf16", no, "2.2"),
    ("normgrad", "rmsnorm", "backward", "bf16", w, "1.5"),
    ("normgrad", "rmsnorm", "backward", "bf16", wb, "1.3"),
    ("normgrad", "rmsnorm", "both", "bf16", no, "3.3000000000000003"),
    ("normgrad", "rmsnorm", "both", "bf16", w, "2.6"),
    ("normgrad", "rmsnorm", "both", "bf16", wb, "2.4000000000000004"),
    ("normgrad", "groupnorm", "forward", "bf16", no, "1.0"),
    ("liger", "rmsnorm", "forward", "bf16", no, "2.2"),
    ("torch-eager", "rmsnorm", "forward", "bf16", no, "5.0"),
    ("torch-eager", "layernorm", "forward", "f16", no, "4.5"),
    ("liger", "layernorm", "forward", "bf16", no, "1.0"),
    ("torch-eager", "rmsnorm", "backward", "bf16", no, "8.0"),
    ("torch-eager", "rmsnorm", "backward", "bf16", w, "6.0"),
    ("torch-eager", "rmsnorm", "backward", "bf16", wb, "2.73"),
    ("torch-eager", "rmsnorm", "both", "bf16", no, "13.0"),
    ("torch-compile", "rmsnorm", "both", "bf16", no, "7.26"),
    ("torch-eager", "groupnorm", "forward", "bf16", no, "3.0"),
])
assert got == want, got
PY

[ $fails = 0 ] && echo "plot_bench.sh: all checks passed"
exit $fails
