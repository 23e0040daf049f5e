#!/usr/bin/env bash
# A build folder copied to another path (tools/split_tests.py --plan on a GPU machine) runs its
# examples against the copy's own libnormgrad.so: the build tree's RUNPATH is $ORIGIN, not the
# folder it was built in. Usage: relocated_build.sh EXAMPLE_PROGRAM LIBRARY_DIR
set -u
prog=${1:?usage: relocated_build.sh EXAMPLE_PROGRAM LIBRARY_DIR} libdir=${2:?library dir}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cp "$prog" "$T/" && cp -P "$libdir"/libnormgrad.so* "$T/" || exit 1
copy="$T/$(basename "$prog")"
lib=$(ldd "$copy" | awk '/libnormgrad\.so/ {print $3}')
if [ "$lib" != "$T/libnormgrad.so.0" ]; then
  echo "the copied program loads libnormgrad from '$lib', not from its own folder ($T)" >&2
  exit 1
fi
if ! (cd "$T" && "$copy") > "$T/out" 2>&1; then
  cat "$T/out" >&2
  echo "the copied program failed" >&2
  exit 1
fi
echo "relocated build: the copy ran on its own libnormgrad.so"
