#!/usr/bin/env bash
# normgrad-cli tune: usage errors exit 2 before any device work; a dry run reports every pass
# and writes nothing; a real run agrees with what it says it stored (tuning.txt has the line
# exactly when it reported "stored": true, which needs a confirmed gain); the JSON output is one
# object per (N, pass).
# Usage: tune.sh PATH/TO/normgrad-cli
set -u
CLI=${1:?usage: tune.sh normgrad-cli}
. "$(dirname "$0")/common.bash"
ng_cli_test_setup tune
unset NORMGRAD_TUNE

expect 2 "$CLI" tune
expect 2 "$CLI" tune flce
has "no tunable row kernels" err
expect 2 "$CLI" tune rmsnorm --pass sideways
expect 2 "$CLI" tune rmsnorm --hidden 12,x
expect 2 "$CLI" tune rmsnorm --dtype f64
expect 2 "$CLI" tune rmsnorm --total
expect 2 "$CLI" tune rmsnorm --bogus 1
expect 2 "$CLI" tune rmsnorm --frozen-slack x
expect 2 "$CLI" tune rmsnorm --frozen-slack -100
expect 2 "$CLI" tune rmsnorm --frozen-slack 1%
expect 2 "$CLI" tune gemm --size 100
expect 2 "$CLI" tune gemm --size 65536
expect 0 "$CLI" tune --help
has "usage: normgrad-cli tune" out
NORMGRAD_CACHE_DIR=off expect 2 "$CLI" tune rmsnorm --hidden 64 --total 4096
has "cache is off" err

small="--hidden 100,1000 --total 32768"
expect 0 "$CLI" tune rmsnorm $small --dry-run
[ "$(grep -c 'stored: no' "$T/out")" = 6 ] || fail "6 lines (2 N x 3 passes) expected: $(cat "$T/out")"
[ -e "$T/cache/tuning.txt" ] && fail "a dry run wrote tuning.txt"

# polynorm: its forward, its backward (one launch for dW and dB alike) and its backward with both
# frozen (the LoRA pass), each a kind of its own
expect 0 "$CLI" tune polynorm --hidden 1000 --total 32768 --json --dry-run
[ "$(wc -l < "$T/out")" = 3 ] || fail "polynorm: three JSON lines expected: $(cat "$T/out")"
python3 - "$T/out" <<'PY' || fail "polynorm JSON"
import json, sys
ds = [json.loads(l) for l in open(sys.argv[1])]
assert [(d["kind"], d["pass"]) for d in ds] == [("polynorm.fwd", "forward"),
                                                ("polynorm.bwd", "backward"),
                                                ("polynorm.bwd_frozen", "frozen")], ds
for d in ds:
    assert d["hidden"] == 1000, d
    assert d["candidates"] >= 2 and d["rejected"] == 0 and d["best_ms"] > 0 and d["stored"] is False, d
    assert "confirmed" in d and d["confirmed_speedup"] >= 1.0, d
    assert d["confirmed"] == "default" or d["confirmed_speedup"] * 0.99 > 1.0, d
PY
expect 0 "$CLI" tune polynorm --hidden 1000 --total 32768 --json --dry-run --pass frozen
grep -q '"kind":"polynorm.bwd_frozen","pass":"frozen"' "$T/out" || fail "polynorm --pass frozen: $(cat "$T/out")"

# a backward's line serves the passes that share its launch (the frozen backward takes its
# work-group shape, LayerNorm's and PolyNorm's backwards with one gradient all of it): a confirmed
# candidate that makes one of them slower than --frozen-slack allows is kept out and named. At
# -90 they would have to take a tenth of the time, so nothing can be stored; off times none.
for op in rmsnorm layernorm polynorm; do
  expect 0 "$CLI" tune $op --hidden 1000 --pass backward --total 32768 --json --dry-run \
    --frozen-slack -90
  python3 - "$T/out" "$T/err" <<'PY' || fail "$op --frozen-slack -90: $(cat "$T/out" "$T/err")"
import json, sys
d = json.loads(open(sys.argv[1]).read())
kept = [l for l in open(sys.argv[2]) if "the time with it" in l]
assert d["confirmed"] == "default" and d["confirmed_speedup"] == 1.0 and not d["stored"], d
assert d["kept_out"] == len(kept) and d["inherited_worst"] == 1.0, (d, kept)
PY
done
expect 0 "$CLI" tune layernorm --hidden 1000 --pass backward --total 32768 --json --dry-run \
  --frozen-slack off
python3 - "$T/out" <<'PY' || fail "--frozen-slack off: $(cat "$T/out" "$T/err")"
import json, sys
d = json.loads(open(sys.argv[1]).read())
assert d["kept_out"] == 0 and d["inherited_worst"] == 1.0, d
PY
has_not() { ! grep -q -- "$1" "$T/$2" || fail "'$1' in $2: $(cat "$T/$2")"; }
has_not "the time with it" err

# the frozen backward takes the backward's work-group shape at run time, so its scan runs on the
# shape the backward's scan of the same run chose (the rules' where it chose none), and its line
# holds the grid and prefetch alone
for op in rmsnorm polynorm; do
  NORMGRAD_CACHE_DIR="$T/cache2-$op" expect 0 "$CLI" tune $op --hidden 1000 --total 32768 --json
  rm -f "$T/bw_shape"
  python3 - "$T/out" "$T/cache2-$op/tuning.txt" "$T/bw_shape" $op <<'PY' || fail "$op: frozen scan"
import json, os, sys
fw, bw, fz = [json.loads(l) for l in open(sys.argv[1])]
assert (bw["pass"], fz["pass"]) == ("backward", "frozen"), (bw, fz)
def shape(desc):
    kv = dict(x.split("=") for x in desc.split()) if desc != "default" else {}
    return tuple(kv.get(k, "0") for k in ("wg", "reg", "vec"))
want = shape(bw["confirmed"]) if bw["stored"] else ("0", "0", "0")
assert shape(fz["best"]) == want, (bw, fz)
lines = open(sys.argv[2]).read().splitlines() if os.path.exists(sys.argv[2]) else []
for l in lines:
    if f" {sys.argv[4]}.bwd_frozen " in l:
        assert not any(f" {k}=" in l.split("#")[0] for k in ("wg", "reg", "vec")), l
open(sys.argv[3], "w").write(" ".join(want) if bw["stored"] else "")
PY
  # ... and alone, in a later run, on the shape the stored backward line gives
  if [ -s "$T/bw_shape" ]; then
    NORMGRAD_CACHE_DIR="$T/cache2-$op" expect 0 "$CLI" tune $op --hidden 1000 --total 32768 \
      --json --pass frozen --dry-run
    python3 - "$T/out" "$T/bw_shape" <<'PY' || fail "$op: frozen scan alone"
import json, sys
fz = json.loads(open(sys.argv[1]).read())
kv = dict(x.split("=") for x in fz["best"].split())
assert " ".join(kv[k] for k in ("wg", "reg", "vec")) == open(sys.argv[2]).read(), fz
PY
  fi
done

# every candidate runs: bench tensors with the scratch of the launch that needs the most. On a
# 1024-wide GPU, rows of 18432 are where a held candidate (1024 x 4, a partial row a group, on
# grids of up to 1056 groups) needs more than the rules' split on the largest grid, all the
# scratch a scan once had (the H200 did not run four: NG_ERR_BUFFER_TOO_SMALL); enough rows that
# the grids fill. A CPU's candidates take their scratch from the grid alone: a few rows there.
type=$("$CLI" devices --json | python3 -c 'import json, sys
print(next(d["type"] for d in json.load(sys.stdin) if d["default"]))') || fail "devices --json"
rows=4
[ "$type" = GPU ] && rows=2048
for op in rmsnorm layernorm; do
  expect 0 "$CLI" tune $op --hidden 18432 --pass backward --total $((18432 * rows)) --json --dry-run
  python3 - "$T/out" <<'PY' || fail "$op at 18432: $(cat "$T/out" "$T/err")"
import json, sys
d = json.loads(open(sys.argv[1]).read())
assert d["rejected"] == 0 and d["candidates"] >= 2, d
PY
  has_not "did not run" err
done

# a candidate is stored only once confirmed: timed again in turn with the default, its median
# ratio still 1% faster
expect 0 "$CLI" tune rmsnorm --hidden 1000 --pass backward --total 32768 --json
python3 - "$T/out" "$T/cache/tuning.txt" <<'PY' || fail "rmsnorm JSON: what it says it stored"
import json, os, sys
d = json.loads(open(sys.argv[1]).read())
if d["stored"]:
    assert d["confirmed"] != "default" and d["confirmed_speedup"] * 0.99 > 1.0, d
    assert d["inherited_worst"] * 1.01 >= 1.0 - 1e-9, d  # the frozen pass: 1 % at most
else:
    assert d["confirmed"] == "default" and d["confirmed_speedup"] == 1.0, d
    assert d["frozen_grid"] is False, d
# the frozen pass took the candidate's grid to stay within the slack exactly when a frozen line
# (its grid and prefetch alone) was stored beside the backward's
lines = open(sys.argv[2]).read().splitlines() if os.path.exists(sys.argv[2]) else []
frozen = [l.split("#")[0] for l in lines if " rmsnorm.bwd_frozen 9 dtype=bf16 " in l]
assert len(frozen) == (1 if d["frozen_grid"] else 0), (d, lines)
for l in frozen:
    assert not any(f" {k}=" in l for k in ("wg", "reg", "vec")), l
    assert " groups=" in l or " prefetch=" in l, l
    assert " dtype=bf16 n=1000 " in l, l  # the tuned length alone, as the backward's
assert d["bucket"] is False, d
PY
if grep -q '"stored":true' "$T/out"; then
  # the line is the tuned dtype's (bf16, tune's default) and the tuned length's alone
  grep -q "rmsnorm.bwd 9 dtype=bf16 n=1000 " "$T/cache/tuning.txt" ||
    fail "stored: yes but no bf16 rmsnorm.bwd line for n=1000: $(cat "$T/cache/tuning.txt")"
  # the stored values are used: a run with them still computes what the default computes
  expect 0 "$CLI" bench rmsnorm --rows 32 --hidden 1000 --dtype bf16
else
  [ -e "$T/cache/tuning.txt" ] && grep -q "rmsnorm.bwd" "$T/cache/tuning.txt" &&
    fail "stored: false but tuning.txt has the line"
fi
# --bucket: the line serves the bucket (no n=), and replaces the bucket's lines of lengths
NORMGRAD_CACHE_DIR="$T/cache3" expect 0 "$CLI" tune rmsnorm --hidden 1000 --pass backward \
  --total 32768 --json --bucket
python3 - "$T/out" "$T/cache3/tuning.txt" <<'PY' || fail "--bucket: $(cat "$T/out")"
import json, os, sys
d = json.loads(open(sys.argv[1]).read())
assert d["bucket"] is True, d
lines = open(sys.argv[2]).read().splitlines() if os.path.exists(sys.argv[2]) else []
keys = [l.split("#")[0] for l in lines if " rmsnorm.bwd" in l]
assert len(keys) == (0 if not d["stored"] else 2 if d["frozen_grid"] else 1), (d, lines)
for k in keys:
    assert " dtype=bf16 " in k and " n=" not in k, k
PY
[ $fails = 0 ] && echo "tune.sh: all checks passed"
exit $fails
