#!/usr/bin/env bash
# normgrad-cli cache list|clear|prebuild against a private cache folder: a run fills it, list
# shows the entries, a damaged entry is listed as corrupt and then repaired by the next run,
# clear empties it, prebuild fills it with every rmsnorm variant, and each misuse exits with 2.
# Usage: cache.sh PATH/TO/normgrad-cli
set -u
CLI=${1:?usage: cache.sh normgrad-cli}
DATA="$(cd "$(dirname "$0")/../data" && pwd)/rmsnorm_example.safetensors"
. "$(dirname "$0")/common.bash"
ng_cli_test_setup cache

expect 0 "$CLI" cache list
has "0 entries" out
expect 0 "$CLI" run rmsnorm --in "$DATA" --out "$T/o.safetensors"
expect 0 "$CLI" cache list
has "3 entries" out
has "DTYPE=2" out
[ "$(grep -c ' ok$' "$T/out")" = 3 ] || fail "3 valid entries expected: $(cat "$T/out")"
expect 0 "$CLI" cache list --json
has '"valid": true' out
[ "$(grep -c '"program"' "$T/out")" = 3 ] || fail "3 JSON objects expected"

# Damage one entry: listed as corrupt; the next run rebuilds and replaces it.
victim=$(ls "$T/cache"/*.ngpc | head -1)
printf 'garbage' | dd of="$victim" bs=1 seek=200 conv=notrunc status=none
expect 0 "$CLI" cache list
has "1 corrupt" out
expect 0 "$CLI" run rmsnorm --in "$DATA" --out "$T/o2.safetensors"
cmp -s "$T/o.safetensors" "$T/o2.safetensors" || fail "outputs differ after the rebuild"
expect 0 "$CLI" cache list
[ "$(grep -c ' ok$' "$T/out")" = 3 ] || fail "entry not repaired: $(cat "$T/out")"

# clear removes entries only.
touch "$T/cache/keep.txt"
expect 0 "$CLI" cache clear
has "removed 3 files" out
[ -e "$T/cache/keep.txt" ] || fail "clear removed a file that is not an entry"
expect 0 "$CLI" cache list
has "0 entries" out

# --dir, and prebuild: every rmsnorm variant, then nothing left to build.
# (69 programs on a CPU; more on a GPU, where the work-group size follows the row length.)
expect 0 "$CLI" cache prebuild rmsnorm --dir "$T/pre"
n=$(sed -n 's/^ *rmsnorm *\([0-9][0-9]*\) programs: \([0-9]*\) built.*/\1/p' "$T/out")
[ -n "$n" ] && [ "$n" -ge 69 ] || fail "prebuild count: $(cat "$T/out")"
expect 0 "$CLI" cache list --dir "$T/pre"
has "$n entries" out
# the same op again: nothing built (without an op, prebuild would compile every op family)
expect 0 "$CLI" cache prebuild rmsnorm --dir="$T/pre"
has "0 built, $n from the cache" out

# Misuse.
expect 2 "$CLI" cache
expect 2 "$CLI" cache frobnicate
has "unknown action" err
expect 2 "$CLI" cache list extra
expect 2 "$CLI" cache clear --json
expect 2 "$CLI" cache list --dir
expect 2 "$CLI" cache list --bogus
expect 2 "$CLI" cache prebuild no-such-op
has "unknown op 'no-such-op'" err
NORMGRAD_CACHE_DIR=off expect 2 "$CLI" cache list
has "cache is off" err
echo x >"$T/file"
expect 2 "$CLI" cache prebuild rmsnorm --dir "$T/file/sub"
has "could not be stored" err
expect 0 "$CLI" cache --help
has "usage: normgrad-cli cache list" out

if [ "$fails" != 0 ]; then
  echo "$fails check(s) failed" >&2
  exit 1
fi
echo "cache CLI: all checks passed"
