#!/usr/bin/env bash
# docs/api.md documents every public function of include/normgrad.h (a "### `name`" section
# each) and every status code of its table; README.md links it.
#   docs_api.sh SOURCE_DIR
set -euo pipefail
src=$1
header=$src/include/normgrad.h doc=$src/docs/api.md
fail=0
# Function names: the identifier before "(" in each NG_API declaration and static inline helper.
names=$(tr '\n' ' ' <"$header" | grep -oE '(NG_API|static inline) [^;{(]*\(' |
  grep -v '__declspec\|__attribute__' | sed -E 's/\($//; s/.*[ *]//' | sort -u)
count=0
for n in $names; do
  count=$((count + 1))
  if ! grep -qF "### \`$n\`" "$doc"; then
    echo "docs/api.md has no section for $n" >&2
    fail=1
  fi
done
[ "$count" -ge 40 ] || { echo "found only $count functions in the header" >&2; fail=1; }
for code in $(grep -oE 'X\(NG_[A-Z_]+' "$header" | sed 's/X(//'); do
  grep -qF "$code" "$doc" || { echo "docs/api.md does not mention $code" >&2; fail=1; }
done
grep -qF 'docs/api.md' "$src/README.md" || { echo "README.md does not link docs/api.md" >&2; fail=1; }
[ $fail -eq 0 ] && echo "docs/api.md: $count functions, every status code"
exit $fail
