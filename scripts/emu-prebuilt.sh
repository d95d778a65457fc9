#!/usr/bin/env bash
# scripts/emu-prebuilt.sh [BUILD]: remakes runtime/cuda/emu/srk_prebuilt.inc, the kernel
# wrappers' instances that emulated programs (shardc build --backend cuda --cuda-emulate)
# use, which libshardrt_cuda_emu compiles once (emu/srk_prebuilt.cpp) and a program's compile
# leaves out. Run it after changing a wrapper's signature (the library's build then fails on
# the old line: "does not match any template declaration") or adding one, with BUILD (default
# build) a configured build of shardc. The instances of the examples at fp32 and bf16, and of
# tinygpt, llama and qwen2 at the layouts the tests build: each program's source compiled
# without the list (-O0, -c), its srk_* calls' instances read from the object (nm).
# A list that misses an instance costs time, never a wrong build: that one is compiled in place.
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
shardc=$build/shardc
[ -x "$shardc" ] || { echo "emu-prebuilt.sh: $shardc is missing: build shardc first" >&2; exit 1; }
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
# the compiler shardc runs: keeps the source and the include directories, builds nothing
cat > "$w/cxx" <<'SH'
#!/bin/bash
inc=()
for a in "$@"; do case $a in -I*) inc+=("$a") ;; *.cu) src=$a ;; esac; done
n=$(ls "$W/src" | wc -l)
cp "$src" "$W/src/$n.cu"
printf '%s\n' "${inc[@]}" > "$W/inc"
SH
chmod +x "$w/cxx"
mkdir -p "$w/src" "$w/obj"
gen() { # [shardc build flags...]
  W=$w CXX=$w/cxx "$shardc" build "$@" --backend cuda --cuda-emulate -o "$w/bin" > "$w/gen.txt" 2>&1 ||
    echo "   left out (shardc build $*: $(grep -m1 error "$w/gen.txt"))"
}
for m in examples/*.model; do
  for p in fp32 bf16; do gen "$m" --precision $p; done
done
for m in tinygpt llama qwen2; do
  for p in fp32 bf16; do
    for l in "--tp 2" "--tp 2 --sequence-parallel" "--pp 2" "--pp 2 --schedule zb-h1" "--recompute block" \
      "--tp 2 --pp 2 --sequence-parallel"; do
      # shellcheck disable=SC2086
      gen "examples/$m.model" --precision $p $l
    done
  done
done
for p in fp32 bf16; do gen examples/tinygpt.model --precision $p --tp 2 --set make_vocab_size_divisible_by=384; done
mapfile -t inc < "$w/inc"
n=$(ls "$w/src" | wc -l)
echo "$n programs; compiling them (-O0) for their instances"
ls "$w/src" | xargs -P "$(getconf _NPROCESSORS_ONLN)" -I{} \
  "${CXX:-c++}" -std=c++20 -O0 -fopenmp -w -x c++ -DSRK_NO_PREBUILT "${inc[@]}" -c "$w/src/{}" -o "$w/obj/{}.o"
# the instances of the wrappers a program calls by name (weak symbols: instances of templates)
for f in "$w"/src/*.cu; do
  grep -o 'srk_[a-z0-9_]*(' "$f" | tr -d '(' | sort -u > "$w/called"
  nm -C "$w/obj/$(basename "$f").o" | sed -n 's/^[0-9a-f]* W //p' |
    awk 'NR == FNR { called[$0] = 1; next }
         { name = $0; sub(/<.*/, "", name); sub(/.* /, "", name); if (name in called) print }' "$w/called" -
done | LC_ALL=C sort -u > "$w/list"
parts=4
{
  echo "/* srk_prebuilt.inc: made by scripts/emu-prebuilt.sh ($(wc -l < "$w/list") instances of $n programs); do not edit."
  echo " * The kernel wrappers' instances that emulated programs use: declared (extern template) by"
  echo " * srk.cuh in every emulated compile, compiled in libshardrt_cuda_emu by emu/srk_prebuilt.cpp"
  echo " * in $parts parts (SRK_PREBUILT_PART). Types as on LP64 Linux (int64_t is long). */"
  for k in $(seq 0 $((parts - 1))); do
    echo "#if !defined(SRK_PREBUILT_PART) || SRK_PREBUILT_PART == $k"
    awk -v k=$k -v p=$parts '(NR - 1) % p == k { print "SRK_PREBUILT(" $0 ")" }' "$w/list"
    echo "#endif"
  done
} > runtime/cuda/emu/srk_prebuilt.inc
echo "runtime/cuda/emu/srk_prebuilt.inc: $(wc -l < "$w/list") instances"
