#!/usr/bin/env bash
# tools/ab_bench.py: usage errors exit 2; two variants (one binary, one of them with an
# environment setting) alternate over two rounds and each case reports both, with the JSON
# lines tagged by variant and round; a failing call is reported, the rest still run, and the
# exit status is 1. It checks the script, never a speed.
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

printf '# a comment\n\nnosuchop --rows 1\n%s\n' "$case2" >"$T/cases"
expect 1 python3 "$AB" --variant base="$CLI" --cases-file "$T/cases" --rounds 1
has "unknown op" err
has "(no result)" out
has "== $case2" out
grep -q '^  base .* us' "$T/out" || fail "the good case still runs: $(cat "$T/out")"

[ $fails = 0 ] && echo "ab_bench.sh: all checks passed"
exit $fails
