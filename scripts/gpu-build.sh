#!/bin/bash
# gpu-build.sh BUILD BINS ARCHS [CMAKE_OPTION...]: the programs that
# scripts/gpu-check.sh runs, built for the GPU architectures ARCHS (compute
# capabilities, comma-separated: 90, or 80,90). Configures and builds the
# tree in BUILD (targets: SHARDC_GPU_TARGETS, default all, which is every
# example's CUDA binary too; "shardc test_kernels_cuda_nvcc
# step_compare_cuda_nvcc" is what BINS needs), then writes into BINS:
#   test_kernels_cuda                 every CUDA kernel against the host kernels
#   step_compare_cuda                 tinygpt's bf16 program against the host's, step by step
#   tinygpt_fp32, tinygpt_bf16        examples/tinygpt.model, --backend cuda
#   tinygpt_pp2_fp32                  the same in two pipeline stages, block recomputation
#   tinygpt_tp2sp_bf16                bf16 at tensor 2 with sequence parallelism (bf16 collectives)
#   tinygpt_pp2_bf16                  bf16 in two pipeline stages (bf16 boundaries)
#   tinygpt_pp2v_fp32                 two stages of 2 virtual stages each (interleaved schedule)
#   tinygpt_3d_fp32, tinygpt_3d_bf16  tensor 2 x pipeline 2 with sequence parallelism (run at
#                                     dp=2 too: the 8-rank layout on a machine with 8 GPUs)
#   gpt2_bf16                         examples/gpt2.model (GPT-2 124M), --backend cuda,
#                                     vocabulary padded to a multiple of 128 (50304)
#   tinygpt_host                      examples/tinygpt.model, --backend host
# gpu-check.sh calls it on the GPU machine; run where nvcc is and no GPU,
# it makes binaries to carry there (SHARDC_GPU_PREBUILT), so that the GPU's
# minutes go to running them. Exit status 0 when every program was built.
set -u -o pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
bld=$(realpath -m "$1"); bins=$(realpath -m "$2"); archs=$3
shift 3
mkdir -p "$bld" "$bins"
# host kernels for baseline x86-64: the binaries may be carried to another machine
cmake -S "$src" -B "$bld" -DCMAKE_BUILD_TYPE=Release -DSHARDC_CUDA_ARCHS="${archs//,/;}" -DSHARDC_HOST_ARCH=none "$@" \
  > "$bld/cmake.txt" 2>&1 ||
  { tail -30 "$bld/cmake.txt"; echo "gpu-build: cmake could not configure $bld"; exit 1; }
grep -E "shardc cuda|shardrt comm" "$bld/cmake.txt"
targets=${SHARDC_GPU_TARGETS:-all}
# keep going past a failed target: what did build is still worth running
keep=-k
grep -q "^CMAKE_GENERATOR:INTERNAL=Ninja" "$bld/CMakeCache.txt" && keep="-k0"
# shellcheck disable=SC2086
if ! cmake --build "$bld" -j"$(nproc)" --target $targets -- $keep > "$bld/build.txt" 2>&1; then
  grep -E -B2 -A6 "error" "$bld/build.txt" | head -60
  echo "gpu-build: some targets failed (the whole log: $bld/build.txt)"
fi
st=0
sc=$bld/shardc
[ -x "$sc" ] || { echo "gpu-build: $sc was not built"; exit 1; }
cp "$sc" "$bins/shardc" # gpu-check's plan of GPT-2 (memory planned against used)
for t in test_kernels_cuda step_compare_cuda; do
  if [ -x "$bld/$t" ]; then cp "$bld/$t" "$bins/"; else echo "gpu-build: $t was not built"; st=1; fi
done
names=""
one() { # one NAME MODEL OPTIONS...: shardc build into BINS/NAME, in the background (checked after the wait)
  local name=$1 model=$2
  shift 2
  names+=" $name"
  (if ! "$sc" build "$src/examples/$model.model" "$@" -o "$bins/$name" > "$bins/$name.txt" 2>&1; then
     tail -5 "$bins/$name.txt"
     echo "gpu-build: shardc build $model.model $* failed"
   fi) &
}
one tinygpt_fp32 tinygpt --backend cuda --precision fp32 --cuda-arch "$archs"
one tinygpt_bf16 tinygpt --backend cuda --precision bf16 --cuda-arch "$archs"
one tinygpt_pp2_fp32 tinygpt --backend cuda --precision fp32 --cuda-arch "$archs" --pp 2 --recompute block
one tinygpt_tp2sp_bf16 tinygpt --backend cuda --precision bf16 --cuda-arch "$archs" --tp 2 --sequence-parallel
one tinygpt_tp2_bf16 tinygpt --backend cuda --precision bf16 --cuda-arch "$archs" --tp 2
one tinygpt_pp2_bf16 tinygpt --backend cuda --precision bf16 --cuda-arch "$archs" --pp 2
one tinygpt_pp2v_fp32 tinygpt --backend cuda --precision fp32 --cuda-arch "$archs" --pp 2 --virtual-stages 2 \
  --schedule interleaved
one tinygpt_3d_fp32 tinygpt --backend cuda --precision fp32 --cuda-arch "$archs" --tp 2 --pp 2 --sequence-parallel
one tinygpt_3d_bf16 tinygpt --backend cuda --precision bf16 --cuda-arch "$archs" --tp 2 --pp 2 --sequence-parallel
# the vocabulary padded to 50304 as llm.c and Megatron do (aligned logit rows; the loss ignores the padding)
one gpt2_bf16 gpt2 --backend cuda --precision bf16 --cuda-arch "$archs" --set make_vocab_size_divisible_by=128
one tinygpt_host tinygpt --backend host
wait
for b in $names; do
  [ -x "$bins/$b" ] || { echo "gpu-build: $bins/$b is missing"; st=1; }
done
[ $st -eq 0 ] && echo "gpu-build: the programs are in $bins"
exit $st
