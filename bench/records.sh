#!/usr/bin/env bash
# Builds bench/records.c against a build tree's libshardrt.a and runs it: reading JSON Lines
# prompt-completion records, and the per-step count of a batch's loss targets (with --eod-mask-loss too).
# Usage: bench/records.sh [BUILD_DIR] [RECORDS [G [T]]]  (defaults: build, 200000, 512, 1024)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); src=$(cd "$here/.." && pwd)
build=$(cd "${1:-$src/build}" && pwd); shift || true
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
${CC:-cc} -std=c11 -O2 -Wall -Wextra -Werror -I"$src/runtime/include" "$here/records.c" "$build/libshardrt.a" -lm \
  -o "$w/records"
"$w/records" "$w" "$@"
