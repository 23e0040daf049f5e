#!/usr/bin/env bash
# tools/split_tests.py: usage errors exit 2; a plan written from the build's CTest runs with one
# job per cmocka test and the CTest environment; on a made-up build, a failing test, a test
# that outlives the deadline (stopped with what it started), the jobs past the deadline, a
# filter that runs no test and the --durations order are all reported, and the exit status is 1.
# Usage: split_tests.sh PATH/TO/normgrad-cli (the build folder is the binary's).
set -u
CLI=${1:?usage: split_tests.sh normgrad-cli}
BUILD=$(cd "$(dirname "$CLI")" && pwd)
ST="$(dirname "$0")/../../tools/split_tests.py"
. "$(dirname "$0")/common.bash"
ng_cli_test_setup split_tests

expect 2 python3 "$ST" --build "$BUILD" -j 0
expect 2 python3 "$ST" --build "$T/nowhere"
expect 2 python3 "$ST" --build "$BUILD" --select '('
echo '{"not": "a plan"}' >"$T/bad.json"
expect 2 python3 "$ST" --build "$BUILD" --plan "$T/bad.json"
has "not a plan" err

# The real suite's plan, then two of its tests from it: test_tuning split per test, docs_api whole.
expect 0 python3 "$ST" --build "$BUILD" --write-plan "$T/plan.json"
grep -q '"{build}/tests/test_tuning"' "$T/plan.json" || fail "plan: $(head -c 400 "$T/plan.json")"
expect 2 python3 "$ST" --build "$BUILD" --plan "$T/plan.json" --select '^nosuchtest$'
n=$(NORMGRAD_TEST_LIST=1 "$BUILD/tests/test_tuning" | tail -n +2 | wc -l)
[ "$n" -ge 2 ] || fail "test_tuning lists $n tests"
expect 0 python3 "$ST" --build "$BUILD" --plan "$T/plan.json" \
  --select '^(test_tuning\.|docs_api$)' -j 2 --out "$T/real"
[ "$(grep -c '^PASS .* test_tuning\.test_' "$T/out")" = "$n" ] || fail "$n jobs: $(cat "$T/out")"
has "PASS .* docs_api$" out
has "^$((n + 1))/$((n + 1)) passed" out
[ -s "$T/real/test_tuning.test_env.log" ] || fail "no log of test_tuning.test_env"

# A made-up build: test_fake lists ok, bad, zero and slow; test_quick lists a and b.
mkdir -p "$T/fb/tests"
cat >"$T/fb/tests/test_fake" <<'SH'
#!/usr/bin/env bash
if [ -n "${NORMGRAD_TEST_LIST:-}" ]; then
  printf '# normgrad tests\nok\nbad\nzero\nslow\n'
  exit 0
fi
[ "$FAKE_ENV" = "from-plan" ] || { echo "no CTest environment"; exit 9; }
case "$NORMGRAD_TEST_FILTER" in
  ok) echo "Running 1 test(s)"; exit 0 ;;
  bad) echo "Running 1 test(s)"; exit 1 ;;
  zero) echo "Running 0 test(s)"; exit 0 ;;
  slow) echo "Running 1 test(s)"; sleep 31.25 & wait; exit 0 ;;
esac
exit 8
SH
cat >"$T/fb/tests/test_quick" <<'SH'
#!/usr/bin/env bash
if [ -n "${NORMGRAD_TEST_LIST:-}" ]; then printf '# normgrad tests\na\nb\n'; exit 0; fi
echo "Running 1 test(s)"
SH
chmod +x "$T/fb/tests/test_fake" "$T/fb/tests/test_quick"
cat >"$T/fplan.json" <<'JSON'
[{"name": "fake", "command": ["{build}/tests/test_fake"], "env": ["FAKE_ENV=from-plan"],
  "cwd": "{build}/tests", "timeout": 0},
 {"name": "plain", "command": ["/bin/sh", "-c", "echo whole"], "env": [], "cwd": "{build}",
  "timeout": 0},
 {"name": "quick", "command": ["{build}/tests/test_quick"], "env": [], "cwd": "{build}",
  "timeout": 0}]
JSON
expect 1 python3 "$ST" --build "$T/fb" --plan "$T/fplan.json" -j 1 --deadline 3 --out "$T/fake"
has "^PASS .* fake\.ok$" out
has "^FAIL (1) .* fake\.bad$" out
has "^FAIL (ran no test) .* fake\.zero$" out
has "^TIMEOUT .* fake\.slow$" out
has "^NOT RUN .* plain$" out
has "^NOT RUN .* quick\.b$" out
has "^1/7 passed" out
for c in /proc/[0-9]*/cmdline; do # no pgrep: procps need not be installed
  [ "$(tr '\0' ' ' <"$c" 2>/dev/null)" = "sleep 31.25 " ] &&
    fail "the stopped job's child still runs"
done
python3 - "$T/fake/summary.json" <<'PY' || fail "summary.json"
import json, sys
jobs = json.load(open(sys.argv[1]))["jobs"]
assert [j["job"] for j in jobs] == ["fake.ok", "fake.bad", "fake.zero", "fake.slow", "plain",
                                    "quick.a", "quick.b"], jobs
assert jobs[3]["status"] == "TIMEOUT" and 2 <= jobs[3]["seconds"] < 10, jobs[3]
PY
echo '{"jobs": [{"job": "quick.b", "seconds": 5}, {"job": "plain", "seconds": 2}]}' >"$T/dur.json"
expect 0 python3 "$ST" --build "$T/fb" --plan "$T/fplan.json" --select '^(plain$|quick\.)' -j 1 \
  --durations "$T/dur.json"
[ "$(grep -o '  [a-z.]*$' "$T/out" | tr -d ' ' | tr '\n' ' ')" = "quick.b plain quick.a " ] ||
  fail "longest first: $(cat "$T/out")"
grep -q whole "$T/fake/plain.log" 2>/dev/null && fail "plain ran past the deadline"

[ $fails = 0 ] && echo "split_tests.sh: all checks passed"
exit $fails
