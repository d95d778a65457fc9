#!/usr/bin/env bash
# Builds bench/ckpt_checksum.c against a build tree's libshardrt.a and runs it: the cost of the
# data checksum that every safetensors file shardc writes carries and every open checks.
# Usage: bench/ckpt_checksum.sh [BUILD_DIR] [N [R]]  (defaults: build, GPT-2 124M's 124439808 floats, 7)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); src=$(cd "$here/.." && pwd)
build=$(cd "${1:-$src/build}" && pwd); shift || true
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
${CC:-cc} -std=c11 -O2 -I"$src/runtime/include" "$here/ckpt_checksum.c" "$build/libshardrt.a" -lm -o "$w/ckpt_checksum"
"$w/ckpt_checksum" "$w" "$@"
