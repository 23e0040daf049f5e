# Sourced by the tests/cli/*.sh scripts (not a test itself: CTest registers *.sh only).
# Sets T to a private temp folder (removed at exit) holding the cache folder, and defines:
#   fail MSG            count a failed check and say why
#   expect CODE CMD...  run CMD with stdout in $T/out and stderr in $T/err; check the exit code
#   has TEXT FILE       TEXT occurs in $T/FILE
# Usage: ng_cli_test_setup NAME (the temp folder is /tmp/ng-cli-NAME-XXXXXX).
ng_cli_test_setup() {
  T=$(mktemp -d "/tmp/ng-cli-$1-XXXXXX")
  trap 'rm -rf "$T"' EXIT
  export NORMGRAD_CACHE_DIR="$T/cache"
  fails=0
}
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
expect() {
  local want=$1; shift
  "$@" >"$T/out" 2>"$T/err"
  local rc=$?
  [ "$rc" = "$want" ] || fail "'$*' exited $rc, expected $want; stderr: $(cat "$T/err")"
}
has() { grep -q -- "$1" "$T/$2" || fail "'$1' not in $2: $(cat "$T/$2")"; }
