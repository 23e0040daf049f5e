#!/usr/bin/env bash
# tools/bench_sweep.sh's loops, on a stand-in for normgrad-cli that prints one made-up bench line
# per call: every op, N, dtype and frozen setting asked for runs once (an op without a bias runs
# its one frozen backward once), the rows follow --total, a failed run leaves an error line that
# says which dtype and setting failed and the sweep goes on, and bad lists are refused before
# anything runs; the peers' script is asked for every dtype and frozen setting (PyTorch hidden,
# so that its lines are "skipped" ones). It checks the script, never a speed.
# Usage: bench_sweep.sh [normgrad-cli] (the CLI is not used).
set -u
SWEEP="$(dirname "$0")/../../tools/bench_sweep.sh"
. "$(dirname "$0")/common.bash"
ng_cli_test_setup bench_sweep

# the stand-in: "bench OP --rows R --hidden N --dtype D --pass P [--freeze-weight] [--freeze-bias]
# ... --json"; it fails where STUB_FAIL names "OP DTYPE bias" and the bias is frozen
cat >"$T/cli" <<'SH'
#!/usr/bin/env bash
[ "$1" = bench ] || { echo "stub: only bench" >&2; exit 2; }
op=$2; shift 2
fw=false fb=false
while [ $# -gt 0 ]; do
  case "$1" in
    --rows) rows=$2; shift 2 ;; --hidden) n=$2; shift 2 ;; --dtype) dt=$2; shift 2 ;;
    --pass) pass=$2; shift 2 ;; --freeze-weight) fw=true; shift ;; --freeze-bias) fb=true; shift ;;
    *) shift ;;
  esac
done
echo "$op $dt $pass $fw $fb" >>"$STUB_LOG"
if [ "$fb" = true ] && [ "${STUB_FAIL:-}" = "$op $dt bias" ]; then
  echo "normgrad-cli: bench: made-up failure" >&2; exit 1
fi
printf '{"op":"%s","pass":"%s","rows":%s,"hidden":%s,"dtype":"%s","frozen":%s,"frozen_bias":%s,' \
  "$op" "$pass" "$rows" "$n" "$dt" "$fw" "$fb"
printf '"bytes":1000000,"median_ms":0.5,"gbps":2.0,"copy_gbps":4.0,"ratio":0.5}\n'
SH
chmod +x "$T/cli"
export STUB_LOG="$T/log"

# count WHAT: the lines of $T/s.jsonl with that op, dtype, pass and frozen setting
count() {
  python3 - "$T/s.jsonl" "$@" <<'PY'
import json, sys
op, dt, pas, fr = sys.argv[2:6]
n = 0
for line in open(sys.argv[1]):
    r = json.loads(line)
    f = "all" if r.get("frozen_bias") else ("weight" if r.get("frozen") else "0")
    if (r["op"], r.get("dtype"), r["pass"], f) == (op, dt, pas, fr) and "error" not in r:
        n += 1
print(n)
PY
}

: >"$T/log"
expect 0 "$SWEEP" --cli "$T/cli" --ops "rmsnorm layernorm" --ns "1024 4096" --dtype bf16,f32 \
  --frozen weight,all --total 65536 --no-torch --out "$T/s.jsonl"
[ "$(wc -l <"$T/s.jsonl")" = 28 ] || fail "28 lines, got $(wc -l <"$T/s.jsonl")"
[ "$(wc -l <"$T/log")" = 28 ] || fail "28 calls, got $(wc -l <"$T/log")"
for dt in bf16 f32; do
  for want in "rmsnorm forward 0 2" "rmsnorm backward 0 2" "rmsnorm backward weight 2" \
              "rmsnorm backward all 0" "layernorm forward 0 2" "layernorm backward 0 2" \
              "layernorm backward weight 2" "layernorm backward all 2"; do
    set -- $want
    [ "$(count "$1" "$dt" "$2" "$3")" = "$4" ] || fail "$dt $want: $(count "$1" "$dt" "$2" "$3")"
  done
done
python3 - "$T/s.jsonl" <<'PY' || fail "rows = total / N"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    assert r["rows"] * r["hidden"] == 65536, r
PY
# the sweep's summary tells the settings apart
grep -q "^normgrad       layernorm               backward    1024 f32   all " "$T/out" ||
  fail "summary: no all-frozen LayerNorm line"

# --dtype all is the three dtypes; --frozen all alone gives RMSNorm its frozen bias too (as before)
expect 0 "$SWEEP" --cli "$T/cli" --ops rmsnorm --ns 1024 --dtype all --frozen all --total 65536 \
  --no-torch --out "$T/s.jsonl"
for dt in bf16 f16 f32; do
  [ "$(count rmsnorm "$dt" backward all)" = 1 ] || fail "--dtype all: $dt"
done
[ "$(wc -l <"$T/s.jsonl")" = 9 ] || fail "--dtype all: $(wc -l <"$T/s.jsonl") lines"

# a failed run leaves an error line naming its dtype and setting; the rest still run
export STUB_FAIL="layernorm f32 bias"
expect 1 "$SWEEP" --cli "$T/cli" --ops "rmsnorm layernorm" --ns "1024 4096" --dtype bf16,f32 \
  --frozen weight,all --total 65536 --no-torch --out "$T/s.jsonl"
unset STUB_FAIL
[ "$(wc -l <"$T/s.jsonl")" = 28 ] || fail "with failures: $(wc -l <"$T/s.jsonl") lines"
python3 - "$T/s.jsonl" <<'PY' || fail "error lines"
import json, sys
errs = [json.loads(l) for l in open(sys.argv[1]) if '"error"' in l]
assert len(errs) == 2, errs
for e in errs:
    assert (e["impl"], e["op"], e["dtype"], e["pass"], e["frozen"], e["frozen_bias"]) == \
        ("normgrad", "layernorm", "f32", "backward", True, True), e
    assert "made-up failure" in e["error"], e
PY
has "ERROR: normgrad layernorm backward 1024 f32 all frozen: normgrad-cli: bench: made-up failure" out

# the peers: one bench_torch.py process per (op, dtype, N), asked for each frozen setting; a
# stand-in torch module that fails to import makes every peer line a "skipped" one, whether or
# not PyTorch is installed here, and the sweep still succeeds
mkdir -p "$T/notorch"
echo 'raise ImportError("the test hides PyTorch")' >"$T/notorch/torch.py"
export PYTHONPATH="$T/notorch"
expect 0 "$SWEEP" --cli "$T/cli" --ops "rmsnorm layernorm" --ns 1024 --dtype bf16,f32 \
  --frozen weight,all --total 65536 --torch-device cpu --torch-impls eager \
  --torch-passes forward,backward --out "$T/s.jsonl"
unset PYTHONPATH
python3 - "$T/s.jsonl" <<'PY' || fail "peer lines"
import json, sys
from collections import Counter
got = Counter()
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("impl", "normgrad") == "normgrad":
        continue
    assert r["impl"] == "torch-eager" and "skipped" in r, r
    f = "all" if r["frozen_bias"] else ("weight" if r["frozen"] else "0")
    got[(r["op"], r["dtype"], r["pass"], f)] += 1
want = Counter()
for dt in ("bf16", "f32"):
    for op, frozen in (("rmsnorm", ["weight"]), ("layernorm", ["weight", "all"])):
        want[(op, dt, "forward", "0")] += 1
        want[(op, dt, "backward", "0")] += 1
        for f in frozen:
            want[(op, dt, "backward", f)] += 1
assert got == want, (got, want)
PY
has "skipped: torch-eager layernorm backward 1024 f32 all frozen: PyTorch is not installed" out

# bad lists are refused before anything runs
: >"$T/log"
for bad in "--dtype bf8" "--dtype ," "--frozen none" "--frozen weight,bias"; do
  expect 2 "$SWEEP" --cli "$T/cli" --ops rmsnorm --ns 1024 $bad --no-torch --out "$T/s.jsonl"
done
[ -s "$T/log" ] && fail "a refused sweep ran the CLI: $(cat "$T/log")"

[ $fails = 0 ] && echo "bench_sweep.sh: all checks passed"
exit $fails
