#!/usr/bin/env bash
# tools/plot_bench.py --summary on made-up sweep lines: --median keeps normgrad's median run,
# --fastest-peers pools other runs' peer lines (not their normgrad lines) and keeps each peer's
# fastest time per cell, GroupNorm lines from before the "groups" field meet the newer lines of
# the same cell, and the summary ends with the least speedups. It checks the script, never a
# speed. Usage: plot_bench.sh [normgrad-cli] (the CLI is not used).
set -u
PB="$(dirname "$0")/../../tools/plot_bench.py"
. "$(dirname "$0")/common.bash"
ng_cli_test_setup plot_bench

# line IMPL OP PASS FROZEN MS [GROUPS]: one timed JSON line (rows 64, N 1024, bf16); GROUPS "-"
# leaves the field out, as sweeps before it did
line() {
  python3 - "$@" <<'PY'
import json, sys
impl, op, pas, frozen, ms = sys.argv[1:6]
r = {"op": op, "pass": pas, "rows": 64, "hidden": 1024, "dtype": "bf16",
     "frozen": frozen == "1", "frozen_bias": False, "bytes": 1000000, "median_ms": float(ms),
     "gbps": 1.0 / float(ms), "copy_gbps": 2.0, "ratio": 0.5 / float(ms)}
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
line normgrad groupnorm forward 0 1.0 32 >>"$T/sweeps.jsonl"
# run A: peers and a normgrad line of its own, which --fastest-peers must leave out
{
  line normgrad rmsnorm forward 0 0.1
  line torch-eager rmsnorm forward 0 5.0
  line torch-eager rmsnorm backward 0 8.0
  line torch-eager rmsnorm both 0 13.0
  line liger rmsnorm forward 0 3.3
  line torch-eager groupnorm forward 0 4.0 32
} >"$T/a.jsonl"
# run B: a faster Liger forward, a torch.compile forward + backward, an old GroupNorm line
{
  line liger rmsnorm forward 0 2.2
  line torch-compile rmsnorm both 0 7.26
  line torch-eager groupnorm forward 0 3.0 -
} >"$T/b.jsonl"

expect 0 python3 "$PB" --summary --median "$T/sweeps.jsonl" --fastest-peers "$T/a.jsonl" "$T/b.jsonl"
# column 6: the best peer, column 8: the speedup
sp() { awk -v op="$1" -v p="$2" -v f="$3" '$1 == op && $2 == p && $4 == f { print $6, $8 }' "$T/out"; }
[ "$(sp rmsnorm forward False)" = "liger 2.00x" ] || fail "forward: $(sp rmsnorm forward False)"
[ "$(sp rmsnorm backward False)" = "torch-eager 3.64x" ] || fail "backward: $(sp rmsnorm backward False)"
# normgrad's forward + backward is the sum of its medians, 3.3 ms
[ "$(sp rmsnorm both False)" = "torch-compile 2.20x" ] || fail "both: $(sp rmsnorm both False)"
[ "$(sp groupnorm forward False)" = "torch-eager 3.00x" ] || fail "groupnorm: $(sp groupnorm forward False)"
has "least speedup, every pass: 2.00x (rmsnorm forward N=1024, beside liger)" out
has "least speedup, forward + backward: 2.20x (rmsnorm both N=1024, beside torch-compile)" out

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
got = sorted((r["impl"], r["op"], r["pass"], r["frozen"], r["median_ms"]) for r in rows)
want = sorted([
    ("normgrad", "rmsnorm", "forward", "False", "1.1"),
    ("normgrad", "rmsnorm", "backward", "False", "2.2"),
    ("normgrad", "rmsnorm", "backward", "True", "1.5"),
    ("normgrad", "rmsnorm", "both", "False", "3.3000000000000003"),
    ("normgrad", "rmsnorm", "both", "True", "2.6"),
    ("normgrad", "groupnorm", "forward", "False", "1.0"),
    ("liger", "rmsnorm", "forward", "False", "2.2"),
    ("torch-eager", "rmsnorm", "forward", "False", "5.0"),
    ("torch-eager", "rmsnorm", "backward", "False", "8.0"),
    ("torch-eager", "rmsnorm", "both", "False", "13.0"),
    ("torch-compile", "rmsnorm", "both", "False", "7.26"),
    ("torch-eager", "groupnorm", "forward", "False", "3.0"),
])
assert got == want, got
PY

[ $fails = 0 ] && echo "plot_bench.sh: all checks passed"
exit $fails
