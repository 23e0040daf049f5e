#!/usr/bin/env bash
# tools/ab_bench.py: usage errors exit 2; two variants (one binary, one of them with an
# environment setting) alternate over two rounds and each case reports both, with the JSON
# lines tagged by variant and round; a failing call is reported, the rest still run, and the
# exit status is 1; with --check, outputs that differ from the baseline's fail it too (and
# bench's --save-outputs / --check-outputs beneath it); --report gives a run's report again from
# its JSON lines, pooled over several files. It checks the script, never a speed.
# Usage: ab_bench.sh PATH/TO/normgrad-cli
set -u
CLI=${1:?usage: ab_bench.sh normgrad-cli}
AB="$(dirname "$0")/../../tools/ab_bench.py"
. "$(dirname "$0")/common.bash"
ng_cli_test_setup ab_bench
unset NORMGRAD_TUNE

expect 2 python3 "$AB"
expect 2 python3 "$AB" --variant a="$CLI"
expect 2 python3 "$AB" --variant "$CLI" --case "rmsnorm --rows 4 --hidden 64 --dtype f32"
expect 2 python3 "$AB" --variant a="$CLI" --env b:X=1 --case "rmsnorm --rows 4 --hidden 64 --dtype f32"
expect 2 python3 "$AB" --variant a="$CLI" --variant a="$CLI" --case "rmsnorm --rows 4 --hidden 64"

case1="rmsnorm --rows 16 --hidden 256 --dtype bf16 --pass backward"
case2="layernorm --rows 8 --hidden 100 --dtype f32 --pass forward"
expect 0 python3 "$AB" --variant base="$CLI" --variant nopf="$CLI" \
  --env nopf:NORMGRAD_TUNE=prefetch=1 --case "$case1" --case "$case2" --rounds 2 --out "$T/ab.jsonl"
has "== $case1" out
has "== $case2" out
[ "$(grep -c '^  base ' "$T/out")" = 2 ] || fail "two base lines expected: $(cat "$T/out")"
[ "$(grep -c '^  nopf .*time [+-]' "$T/out")" = 2 ] || fail "two nopf lines: $(cat "$T/out")"
grep -q 'ng_rmsnorm_bwd=.*ng_reduce_partials=' "$T/out" || fail "per-kernel times: $(cat "$T/out")"
python3 - "$T/ab.jsonl" <<'PY' || fail "JSON lines"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 8, len(rows)
# the variants alternate within each round, case by case
order = [(r["round"], r["case"].split()[0], r["variant"]) for r in rows]
assert order[:4] == [(1, "rmsnorm", "base"), (1, "rmsnorm", "nopf"),
                     (1, "layernorm", "base"), (1, "layernorm", "nopf")], order
assert all(r["median_ms"] > 0 and r["op"] in ("rmsnorm", "layernorm") for r in rows)
PY
# --report: the run's lines give the run's report; the first six (round 2 without case2) mark
# case2's lines "(1 of 2 rounds)", and the last two pooled with them give the whole report again
cp "$T/out" "$T/live"
expect 0 python3 "$AB" --report "$T/ab.jsonl"
cmp -s "$T/out" "$T/live" || fail "--report: $(diff "$T/live" "$T/out")"
head -6 "$T/ab.jsonl" >"$T/ab1.jsonl"
tail -2 "$T/ab.jsonl" >"$T/ab2.jsonl"
expect 0 python3 "$AB" --report "$T/ab1.jsonl"
[ "$(grep -c '(1 of 2 rounds)' "$T/out")" = 2 ] || fail "a cut run's report: $(cat "$T/out")"
expect 0 python3 "$AB" --report "$T/ab1.jsonl" --report "$T/ab2.jsonl"
cmp -s "$T/out" "$T/live" || fail "--report pooled: $(diff "$T/live" "$T/out")"
# files that pool runs of other variant sets: a variant a case has no line of is left out of
# that case's lines (nopf's lines of case2 taken away), not reported as "(no result)"
grep -v "\"variant\": \"nopf\".*\"case\": \"$case2\"" "$T/ab.jsonl" >"$T/ab3.jsonl"
[ "$(wc -l <"$T/ab3.jsonl")" = 6 ] || fail "nopf's case2 lines: $(cat "$T/ab3.jsonl")"
expect 0 python3 "$AB" --report "$T/ab3.jsonl"
[ "$(grep -c '^  nopf ' "$T/out")" = 1 ] || fail "nopf in case1 alone: $(cat "$T/out")"
grep -q "(no result)" "$T/out" && fail "a variant not run reported as no result: $(cat "$T/out")"
expect 2 python3 "$AB" --report "$T/nothing.jsonl"
expect 2 python3 "$AB" --report "$T/ab.jsonl" --rounds 3
has "runs nothing" err
expect 2 python3 "$AB" --report "$T/ab.jsonl" --variant a="$CLI"
printf '{"variant": "a", "case": "x", "median_ms": "fast"}\n' >"$T/bad.jsonl"
expect 2 python3 "$AB" --report "$T/bad.jsonl"
has "bad.jsonl:1: not a line of ab_bench.py --out" err
: >"$T/empty.jsonl"
expect 2 python3 "$AB" --report "$T/empty.jsonl"

printf '# a comment\n\nnosuchop --rows 1\n%s\n' "$case2" >"$T/cases"
expect 1 python3 "$AB" --variant base="$CLI" --cases-file "$T/cases" --rounds 1 --out "$T/err.jsonl"
has "unknown op" err
has "(no result)" out
has "== $case2" out
grep -q '^  base .* us' "$T/out" || fail "the good case still runs: $(cat "$T/out")"
expect 1 python3 "$AB" --report "$T/err.jsonl"
has "== nosuchop --rows 1" out
has "(no result)" out

# --deadline: no call starts after it; the report says what ran (here nothing), exit 3
expect 2 python3 "$AB" --variant base="$CLI" --case "$case2" --deadline 0
expect 3 python3 "$AB" --variant base="$CLI" --case "$case2" --deadline 0.000001
has "(no result)" out
has "deadline: 1e-06 s reached; round 1, $case2, base and the calls after it did not run" err
expect 0 python3 "$AB" --variant base="$CLI" --case "$case2" --rounds 2 --deadline 600
grep -q '^  base .* us  ratio [0-9.-]*$' "$T/out" || fail "two rounds within the deadline: $(cat "$T/out")"

# bench --save-outputs / --check-outputs: the same case agrees with itself and under another
# grid; a file of another case, both options, a missing file or an empty name exit 2 before
# any run; an unwritable path leaves nothing behind
expect 0 "$CLI" bench $case1 --json --save-outputs "$T/ref.st"
expect 0 "$CLI" inspect "$T/ref.st"
has "out0 " out
has "out1 " out
expect 0 "$CLI" bench $case1 --json --check-outputs "$T/ref.st"
NORMGRAD_TUNE=groups=3 expect 0 "$CLI" bench $case1 --json --check-outputs "$T/ref.st"
python3 -c 'import json,sys; w=json.load(open(sys.argv[1]))["outputs_check"]; assert 0 <= w <= 1, w' \
  "$T/out" || fail "outputs_check: $(cat "$T/out")"
expect 0 "$CLI" bench $case1 --check-outputs "$T/ref.st"
has "outputs    agree with" out
expect 2 "$CLI" bench $case1 --freeze-weight --check-outputs "$T/ref.st"
has "the file has 2 tensors; this pass writes 1" err
expect 2 "$CLI" bench rmsnorm --rows 16 --hidden 128 --dtype bf16 --check-outputs "$T/ref.st"
has "'out0' is another dtype or length" err
expect 2 "$CLI" bench $case1 --check-outputs "$T/ref.st" --save-outputs "$T/x.st"
has "one at a time" err
expect 2 "$CLI" bench $case1 --check-outputs "$T/nothing.st"
expect 2 "$CLI" bench $case1 --save-outputs ""
expect 2 "$CLI" bench $case1 --save-outputs "$T/no/such/dir/x.st"
[ -e "$T/no" ] && fail "an unwritable --save-outputs left something behind"
# a changed value (dW's first, which is far from zero) is reported, the exit code stays 0
python3 - "$T/ref.st" "$T/bad.st" <<'PY' || fail "tampering the reference"
import json, struct, sys
d = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", d[:8])[0]
h = json.loads(d[8:8 + n])
a = 8 + n + h["out1"]["data_offsets"][0]
v = struct.unpack("<f", d[a:a + 4])[0]
d[a:a + 4] = struct.pack("<f", v * 1.5 + 1.0)
open(sys.argv[2], "wb").write(d)
PY
expect 0 "$CLI" bench $case1 --check-outputs "$T/bad.st"
has "outputs    DIFFER from" out
has "x the allowed one, in dweight" out
expect 0 "$CLI" bench $case1 --json --check-outputs "$T/bad.st"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
assert d["outputs_check"] > 1 and d["outputs_check_worst"] == "dweight", d' "$T/out" ||
  fail "outputs_check_worst: $(cat "$T/out")"

# ab_bench --check: the baseline saves, the others check; a variant whose outputs differ (a
# wrapper that adds --offset 1, so RMSNorm's weight is 1 + w) fails the run
printf '#!/bin/sh\nexec "%s" "$@" --offset 1\n' "$CLI" >"$T/offset.sh"
chmod +x "$T/offset.sh"
expect 0 python3 "$AB" --variant base="$CLI" --variant nopf="$CLI" \
  --env nopf:NORMGRAD_TUNE=prefetch=1 --case "$case1" --case "$case2" --rounds 2 --check \
  --out "$T/check.jsonl"
[ "$(grep -c '^  nopf .*outputs agree' "$T/out")" = 2 ] || fail "--check: $(cat "$T/out")"
cp "$T/out" "$T/live"
expect 0 python3 "$AB" --report "$T/check.jsonl"
cmp -s "$T/out" "$T/live" || fail "--report of a --check run: $(diff "$T/live" "$T/out")"
expect 1 python3 "$AB" --variant base="$CLI" --variant off="$T/offset.sh" --case "$case1" \
  --rounds 1 --check --out "$T/differ.jsonl"
has "outputs DIFFER" out
grep -q 'outputs DIFFER ([0-9.e+]*, in dx)' "$T/out" || fail "the output that differs: $(cat "$T/out")"
expect 1 python3 "$AB" --report "$T/differ.jsonl"
grep -q 'outputs DIFFER ([0-9.e+]*, in dx)' "$T/out" ||
  fail "--report of outputs that differ: $(cat "$T/out")"
# a backward's inputs come from the rules' forward whatever NORMGRAD_TUNE sets: the fused add's
# dW under launches that move its forward's rstd by an ulp (xhat's bf16 rounding, summed in
# llama mode) agrees with the rules' (41 and 65 times the bound when the override ran the
# forward too), and a dW that differs is still reported under an override
case3="fused-add-rmsnorm --rows 64 --hidden 4096 --dtype bf16 --pass backward"
expect 0 "$CLI" bench $case3 --json --save-outputs "$T/fa.st"
for tune in wg=64,reg=2 vec=1; do
  NORMGRAD_TUNE=$tune expect 0 "$CLI" bench $case3 --json --check-outputs "$T/fa.st"
  python3 -c 'import json,sys; w=json.load(open(sys.argv[1]))["outputs_check"]; assert 0 <= w <= 1, w' \
    "$T/out" || fail "the fused add's backward under $tune: $(cat "$T/out")"
done
NORMGRAD_TUNE=vec=1 expect 0 "$CLI" bench $case1 --check-outputs "$T/bad.st"
has "x the allowed one, in dweight" out

[ $fails = 0 ] && echo "ab_bench.sh: all checks passed"
exit $fails
