#!/usr/bin/env bash
# Installs the build into a temporary prefix and builds a consumer against it both ways: CMake's
# find_package(normgrad) (shared and static targets) and pkg-config.
#   run.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cmake -S "$src/tests/consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/consumer" >/dev/null
"$tmp/consumer/consumer_shared"
"$tmp/consumer/consumer_static"
libdir=$(dirname "$(find "$tmp/prefix" -name normgrad.pc)")
export PKG_CONFIG_PATH=$libdir
cc -std=c11 -Wall -Wextra -o "$tmp/pc_consumer" "$src/tests/consumer/main.c" $(pkg-config --cflags --libs normgrad)
LD_LIBRARY_PATH="$libdir/..:${LD_LIBRARY_PATH:-}" "$tmp/pc_consumer"
[ -x "$tmp/prefix/bin/normgrad-cli" ] && "$tmp/prefix/bin/normgrad-cli" --version
echo "consumer builds (CMake shared, CMake static, pkg-config) all ran"
