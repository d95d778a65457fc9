#!/bin/bash
# gpu_check_dry.sh GEN_CUDA SHARDC SRCDIR TEST_KERNELS_EMU STEP_COMPARE_BF16: scripts/gpu-check.sh,
# the one script a GPU machine runs (device time is short and rare), run
# here so that it cannot rot: nvidia-smi is a stand-in that reports an
# H200, the programs are the emulated CUDA builds (SHARDC_GPU_PREBUILT) on
# one pretend device (EMU_SHARED_GPU=1: NCCL refuses two ranks as on the
# one-GPU machine), and gpt2_bf16 is a stand-in that logs a known
# throughput and a profile (GPT-2 itself is far too slow to emulate). The
# script's own checks must pass (kernels, fp32 losses vs the host, bf16
# with the default attention (auto) and with mma.sync vs the host, the --comm mpi fallback at dp=2,
# bf16 ZeRO-1, bf16 tp=2 with and without sequence parallelism, pp=2 in fp32 and bf16), its MFU must be the one
# worked out by hand from the stand-in's tokens/s, and its memory line the stand-in's peak against
# shardc plan's total (5% over: passes; 20% over: its one FAIL). cuDNN's attention
# cannot run on the emulator: a last run checks that its probe fails
# plainly and that the script goes on without it. The several-GPU stage
# (multi) says it is left out on the one GPU, and runs every layout on
# eight pretend GPUs (a process each, NCCL between them emulated). (SHARDC_GPU_BUILD is a
# path that cannot be made: refused programs fail at once instead of building.)
# The time budget for the extras (SHARDC_GPU_BUDGET) is lifted for the runs that
# check them (the emulator is far slower than a GPU); a last run with a budget of
# 1 s checks that each extra is left out, said so, and that the checks still run.
tk=$(realpath "$4") sc=$(realpath "$5") # before lib.sh enters its scratch directory
export SHARDC_GPU_BUDGET=1000000
source "$(dirname "$0")/lib.sh"
mkdir -p fake bins
cat > fake/nvidia-smi <<'SH'
#!/bin/bash
case "$*" in
  -L) for i in $(seq 0 $((${FAKE_GPUS:-1} - 1))); do echo "GPU $i: NVIDIA H200 (stand-in for gpu_check_dry.sh)"; done ;;
  *query-gpu=name\ *) echo "${FAKE_GPU_NAME:-NVIDIA H200}" ;;
  *name,memory*) echo "${FAKE_GPU_NAME:-NVIDIA H200}, 143771 MiB, 0.0, 9.0, 1980 MHz" ;;
  *compute_cap*) echo "9.0" ;;
  *clocks.sm*) echo "1980 MHz, 3201 MHz, 120 W, 35" ;;
esac
SH
# the stand-in GPT-2: 30 steps at TPS tokens/s; a profile under SHARDC_CUDA_PROFILE=1; PEAK
# bytes of device memory in its --comm-stats
cat > bins/gpt2_bf16 <<'SH'
#!/bin/bash
log=/dev/null; steps=1; quiet=0; stats=/dev/null
while [ $# -gt 0 ]; do
  case $1 in --log) log=$2; shift ;; --steps) steps=$2; shift ;; --quiet) quiet=1 ;; --comm-stats) stats=$2; shift ;;
    --data) [ -s "$2" ] || { echo "error: cannot open data file $2" >&2; exit 1; }; shift ;; esac
  shift
done
# under mpirun (data parallelism) rank 0 alone logs, as the programs do, at 90% scaling
n=${OMPI_COMM_WORLD_SIZE:-1}
[ "${OMPI_COMM_WORLD_RANK:-0}" = 0 ] || log=/dev/null stats=/dev/null
tps=$(( ${TPS:-400000} * (n > 1 ? 9 * n : 10) / 10 ))
: > "$log"
printf 'steps %s\npeak_bytes %s\n' "$steps" "${PEAK:-0}" > "$stats"
[ "${SHARDC_CUDA_GEMM:-}" = tune ] &&
  echo "GEMMs (SHARDC_CUDA_GEMM=tune): 9 problems timed on their first call, 2 on another algorithm than cuBLASLt's first (0.400 ms a call faster in all)" >&2
if [ -n "${GPT2_FAIL_AUTO:-}" ] && [ "${SHARDC_CUDA_ATTN:-auto}" = auto ]; then
  echo "shardc cuda: error: an illegal memory access was encountered (cudaErrorIllegalAddress) in kernel fwd_kernel" >&2
  exit 1
fi
if [ $quiet = 0 ] && [ "${SHARDC_CUDA_ATTN:-auto}" = auto ]; then
  echo "attention (12 heads of 64, q|k|v packed; tried at batch 8 x 1024, forward and backward): wmma 9.000 ms (differs 5.0e-03); using wmma" >&2
fi
for i in $(seq 0 $((steps - 1))); do
  echo "{\"step\":$i,\"loss\":10.9,\"tokens_per_s\":$tps,\"ms\":327.68}" >> "$log"
done
if [ -n "${SHARDC_CUDA_PROFILE:-}" ]; then
  echo "shardc cuda profile (rank 0; 3 steps, the first left out): 1.000 ms of device time in 1 call sites" >&2
  echo "       1.000 100.00        1     1000.0  nn.model:80 causal_attention" >&2
fi
SH
chmod +x fake/nvidia-smi bins/gpt2_bf16
cp "$tk" bins/test_kernels_cuda
cp "$sc" bins/step_compare_cuda
cp "$shardc" bins/shardc
# the stand-in's peak: 5% over what shardc plan says GPT-2 holds at batch 128 (the size it runs)
plan_total() {
  "$shardc" plan "$src/examples/gpt2.model" --set make_vocab_size_divisible_by=128 --gpu h200 --precision bf16 \
    --batch 128 --seq 1024 --json | $py -c "import json, sys; print(json.load(sys.stdin)['roles'][0]['memory']['total'])"
}
total=$(plan_total)
export PEAK=$((total * 105 / 100))
e="'$shardc' build '$m' --backend cuda --cuda-emulate"
check "emulated programs for gpu-check" builds \
  "$e --precision fp32 -o bins/tinygpt_fp32" "$e --precision bf16 -o bins/tinygpt_bf16" \
  "$e --precision fp32 --pp 2 --recompute block -o bins/tinygpt_pp2_fp32" \
  "$e --precision bf16 --tp 2 --sequence-parallel -o bins/tinygpt_tp2sp_bf16" \
  "$e --precision bf16 --tp 2 -o bins/tinygpt_tp2_bf16" "$e --precision bf16 --pp 2 -o bins/tinygpt_pp2_bf16" \
  "$e --precision fp32 --pp 2 --virtual-stages 2 --schedule interleaved -o bins/tinygpt_pp2v_fp32" \
  "$e --precision fp32 --tp 2 --pp 2 --sequence-parallel -o bins/tinygpt_3d_fp32" \
  "$e --precision bf16 --tp 2 --pp 2 --sequence-parallel -o bins/tinygpt_3d_bf16" \
  "'$shardc' build '$m' -o bins/tinygpt_host"
# dry N VAR=VALUE...: gpu-check.sh on the stand-ins and the emulated programs with the settings
# given; what it printed in runN.txt, its log and files in outN/, its exit status in rc
dry() {
  local n=$1
  shift
  env PATH="$w/fake:$PATH" SHARDC_GPU_PREBUILT="$w/bins" SHARDC_GPU_BUILD=/dev/null/nobuild "$@" \
    bash "$src/scripts/gpu-check.sh" "$w/out$n/gpu-check.log" > "run$n.txt" 2>&1
  rc=$?
}
# the first run (every stage on one pretend GPU) keeps one core busy for most of its three
# minutes: it goes on in the background while the short runs after it (the stand-in GPT-2,
# seconds each) run and are checked, and then the eight-GPU run (its checks after the first's)
( dry "" EMU_SHARED_GPU=1 SHARDC_GPU_PRECISIONS="fp32 bf16 bf16-mma" SHARDC_GPU_ATTN_PATHS=mma \
  SHARDC_GPU_TINYGPT="--batch 4 --seq 32" SHARDC_GPU_ATTN_BENCH="1 64 128 2 1" \
  SHARDC_GPU_STAGES=kernels,tinygpt,gpt2,dp,tp,pp,multi TPS=400000; echo "$rc" > rc.main ) &
main=$!
# 600000 tokens/s: 48.7%, the target met, and the script's exit status 0
dry 2 SHARDC_GPU_STAGES=gpt2 TPS=600000 SHARDC_GPU_ATTN_PATHS=mma
check "600000 tokens/s is 48.7% MFU: the target met, exit status 0 (got $rc)" bash -c \
  "[ $rc -eq 0 ] && grep -q 'MFU 48.7% of 989 TFLOP/s' run2.txt && grep -q '^ok   GPT-2 MFU >= 45%' run2.txt"
# 20% more memory than the plan: that check fails, and only it
dry 5 SHARDC_GPU_STAGES=gpt2 TPS=600000 SHARDC_GPU_ATTN_PATHS=mma PEAK=$((total * 120 / 100))
check "20% more device memory than planned: its FAIL, and no other (got $rc)" bash -c \
  "[ $rc -eq 1 ] && grep -q '(+20.0% of the plan)' run5.txt &&
   grep -q \"^FAIL GPT-2: the device memory it used differs from shardc plan's by more than 10%\" run5.txt &&
   [ \$(grep -c '^FAIL' run5.txt) -eq 1 ]"
# the default attention (auto) failing on the GPU (its trial runs paths not yet run on one):
# one probe, not one per batch size, the why, and GPT-2 measured with wmma pinned
dry 4 SHARDC_GPU_STAGES=gpt2 TPS=400000 SHARDC_GPU_ATTN_PATHS=mma GPT2_FAIL_AUTO=1
check "auto failing: one try of it, the FAIL, then GPT-2 with wmma pinned, its MFU (got $rc)" bash -c \
  "[ $rc -eq 1 ] && [ \$(grep -c '^   batch ' run4.txt) -eq 1 ] &&
   grep -q '^FAIL GPT-2 with the default attention (auto) did not run' run4.txt &&
   grep -q 'with SHARDC_CUDA_SYNC=1: shardc cuda: error: an illegal memory access' run4.txt &&
   grep -q 'again with SHARDC_CUDA_ATTN=wmma' run4.txt && grep -q 'largest batch that fits .*: 128 x 1024' run4.txt &&
   grep -q 'MFU 32.5% of 989 TFLOP/s' run4.txt && [ \$(grep -c '^FAIL' run4.txt) -eq 2 ]"
# the default attention paths (mma cudnn) where cuDNN cannot run (the emulator's runtime
# has none): the probe fails, says why, and leaves cudnn out; no other stage
dry 3 SHARDC_GPU_STAGES=none
check "no cuDNN: one FAIL that says why and that the cudnn path is left out (got $rc)" bash -c \
  "[ $rc -eq 1 ] && [ \$(grep -c '^FAIL' run3.txt) -eq 1 ] &&
   grep -q '^FAIL cuDNN attention unavailable: this runtime was built without .* the cudnn path is left out' run3.txt"
# a budget of 1 s: every extra of the GPT-2 stage (the wmma, mma, bias-gradient, tuned-GEMM and Zipf variants,
# the two pinned profiles) and the build at the end are left out, each said so; the MFU, the memory
# check and the default's profile still run
dry 7 SHARDC_GPU_STAGES=gpt2,build SHARDC_GPU_BUDGET=1 SHARDC_GPU_ATTN_PATHS=mma TPS=400000
grep "left out for time" run7.txt | sed 's/^/   | /'
check "a 1 s budget: eight extras left out for time, said so; the MFU, memory and profile still checked (got $rc)" bash -c \
  "[ $rc -eq 1 ] && [ \$(grep -c '^   left out for time: ' run7.txt) -eq 8 ] &&
   grep -q '^   left out for time: GPT-2 with mma attention (SHARDC_CUDA_ATTN=mma), 14 steps (about 20 s; [0-9]* s of the 1 s budget used, 0 s kept' run7.txt &&
   grep -q '^   left out for time: GPT-2.s profile with SHARDC_CUDA_ATTN=wmma' run7.txt &&
   grep -q '^   left out for time: the build here and its programs. checks' run7.txt &&
   ! grep -q ', 14 steps:\$' run7.txt && ! grep -q 'with SHARDC_CUDA_ATTN=mma:' run7.txt &&
   grep -q 'MFU 32.5% of 989 TFLOP/s' run7.txt && grep -q '^   the device arena.s peak' run7.txt &&
   grep -q 'nn.model:80 causal_attention' out7/gpt2-profile.txt &&
   [ \$(grep -c '^FAIL' run7.txt) -eq 1 ] && grep -q 'done: [0-9]* passed, 1 failed, 8 left out for time' run7.txt"
# MFU against the GPU's own peak: an H100 PCIe's 756 TFLOP/s (400000 tokens/s: 42.5%); a GPU the
# script does not know: said so, and SHARDC_GPU_PEAK=500 taken (64.3%: the target met, exit 0)
dry 8 FAKE_GPU_NAME="NVIDIA H100 PCIe" SHARDC_GPU_STAGES=gpt2 SHARDC_GPU_BUDGET=1 SHARDC_GPU_ATTN_PATHS=mma TPS=400000
check "an H100 PCIe: MFU against its 756 TFLOP/s, 42.5% (got $rc)" bash -c \
  "[ $rc -eq 1 ] && grep -q \"^MFU against NVIDIA H100 PCIe's dense bf16 peak, 756 TFLOP/s\" run8.txt &&
   grep -q 'MFU 42.5% of 756 TFLOP/s' run8.txt && grep -q '^FAIL GPT-2 MFU below the 45% target' run8.txt"
dry 9 FAKE_GPU_NAME="NVIDIA Pretend 9000" SHARDC_GPU_PEAK=500 SHARDC_GPU_STAGES=gpt2 SHARDC_GPU_BUDGET=1 \
  SHARDC_GPU_ATTN_PATHS=mma TPS=400000
check "a GPU not known: said so; SHARDC_GPU_PEAK=500 taken, 64.3%, the target met (got $rc)" bash -c \
  "[ $rc -eq 0 ] && grep -q 'NVIDIA Pretend 9000: its bf16 peak is not known here' run9.txt &&
   grep -q 'MFU against NVIDIA Pretend 9000.s dense bf16 peak, 500 TFLOP/s' run9.txt &&
   grep -q 'MFU 64.3% of 500 TFLOP/s' run9.txt && grep -q '^ok   GPT-2 MFU >= 45%' run9.txt"
# eight pretend GPUs (a process each, no EMU_SHARED_GPU): every several-GPU layout over the
# emulated NCCL against one host rank and the same program over --comm mpi (2 steps: 8 emulated
# ranks share two cores), and the stand-in GPT-2 at --dp 8 (90% scaling: 600000 x 0.9 tokens/s
# per GPU is 43.9% MFU per GPU)
dry 6 FAKE_GPUS=8 SHARDC_GPU_STAGES=gpt2,multi TPS=600000 SHARDC_GPU_ATTN_PATHS=mma \
  SHARDC_GPU_TINYGPT="--batch 8 --seq 32" SHARDC_GPU_DPSTEPS=2 SHARDC_GPU_MULTI_TIMEOUT=300
rc6=$rc
wait "$main"; rc=$(cat rc.main)
grep -E "^(==|ok|FAIL)|MFU|tokens/s" run.txt | sed 's/^/   | /'
# 400000 tokens/s x (6 x 124439808 + 6 x 12 x 768 x 1024) FLOPs / 989e12 = 32.5%
check "it ran the programs given (SHARDC_GPU_PREBUILT), building nothing" \
  bash -c "grep -q 'every program loads its libraries' run.txt && ! grep -q '^== .*build' run.txt"
check "kernel tests on the (pretend) device pass" grep -q "^ok   kernels: [0-9]* passed, 0 failed" run.txt
check "the attention benchmark ran each path (attention-bench.txt), and auto's trial at its shape" bash -c \
  "grep -q 'attention wmma .*(ran wmma' run.txt && grep -q 'attention mma.sync .*(ran mma.sync' run.txt &&
   grep -q 'attention simt .*(ran simt' run.txt && grep -q 'hd 64' out/attention-bench.txt &&
   grep -q 'auto, the default: attention (2 heads of 64, q|k|v packed; tried at batch 1 x 64, .* using ' run.txt"
check "tinygpt fp32: 20 losses as the host's" grep -q "^ok   fp32: 20 losses within 1e-4" run.txt
check "3 bf16 steps' gradients vs the host's, with the default (auto), the wmma and the mma.sync attention" bash -c \
  "grep -q '^ok   bf16 gradients of 3 steps (auto attention) vs the host.s: .* 0 failed' run.txt &&
   grep -q '^ok   bf16 gradients of 3 steps (wmma attention) vs the host.s: .* 0 failed' run.txt &&
   grep -q '^ok   bf16 gradients of 3 steps (mma attention) vs the host.s: .* 0 failed' run.txt"
check "GPT-2: batch 128, 400000 tokens/s is 32.5% MFU, below the 45% target" bash -c \
  "grep -q 'largest batch that fits .*: 128 x 1024' run.txt && grep -q 'MFU 32.5% of 989 TFLOP/s' run.txt &&
   grep -q '^FAIL GPT-2 MFU below the 45% target' run.txt"
check "GPT-2: the arena's peak against shardc plan's total at batch 128 ($total bytes): +5.0%, within 10%" bash -c \
  "grep -q '^   shardc plan --precision bf16: [0-9.]* GiB (weights ' run.txt &&
   grep -q '^   the device arena.s peak: [0-9.]* GiB (+5.0% of the plan)' run.txt &&
   grep -q \"^ok   GPT-2: the device memory it used is within 10% of shardc plan's\" run.txt"
check "tinygpt bf16 with the default attention (auto) and with mma.sync (SHARDC_CUDA_ATTN=mma): losses as the host's" \
  bash -c "grep -q '^ok   bf16: 20 losses within 2e-2' run.txt && grep -q '^ok   bf16-mma: 20 losses within 2e-2' run.txt"
check "GPT-2: the attention trial's verdict at the batch that fits" \
  grep -q "^   attention (12 heads of 64, q|k|v packed; tried at batch 8 x 1024, .*using wmma" run.txt
check "GPT-2 with the wmma and the mma.sync attention pinned: 14 steps each, MFU, losses compared with the default's" bash -c \
  "grep -A4 'mma attention (SHARDC_CUDA_ATTN=mma), 14 steps' run.txt | grep -q 'MFU 32.5% of 989' &&
   grep -q \"^ok   mma attention: GPT-2's 14 losses within 1e-2\" run.txt &&
   grep -A4 'wmma attention (SHARDC_CUDA_ATTN=wmma), 14 steps' run.txt | grep -q 'MFU 32.5% of 989' &&
   grep -q \"^ok   wmma attention: GPT-2's 14 losses within 1e-2\" run.txt"
check "GPT-2 with the bias gradients apart (SHARDC_CUDA_BGRAD=0): 14 steps, its MFU, losses compared" bash -c \
  "grep -A4 'bias gradients apart (SHARDC_CUDA_BGRAD=0), 14 steps' run.txt | grep -q 'MFU 32.5% of 989' &&
   grep -q \"^ok   bias gradients apart: GPT-2's 14 losses within 1e-2\" run.txt"
check "GPT-2 with the GEMMs tuned (SHARDC_CUDA_GEMM=tune): 14 steps, its MFU, losses compared, what tuning changed" bash -c \
  "grep -A4 'the GEMMs tuned (SHARDC_CUDA_GEMM=tune), 14 steps' run.txt | grep -q 'MFU 32.5% of 989' &&
   grep -q \"^ok   the GEMMs tuned: GPT-2's 14 losses within 1e-2\" run.txt &&
   grep -q '^   GEMMs (SHARDC_CUDA_GEMM=tune): 9 problems timed on their first call, 2 on another' run.txt"
check "GPT-2 on Zipf-distributed token ids (zipf.bin made, 14 steps on it): its MFU, trained, losses not compared" bash -c \
  "grep -A4 'token ids Zipf-distributed .*(SHARDC_CUDA_ATTN=auto), 14 steps' run.txt | grep -q 'MFU 32.5% of 989' &&
   grep -q '^ok   token ids Zipf-distributed .*: GPT-2 trained 14 steps' run.txt && [ -s out/gpt2-zipf.jsonl ]"
check "the profile is printed and kept (gpt2-profile.txt), and wmma's and mma.sync's (gpt2-profile-*.txt)" bash -c \
  "grep -q 'nn.model:80 causal_attention' run.txt && grep -q 'cuda profile' out/gpt2-profile.txt &&
   grep -A2 'with SHARDC_CUDA_ATTN=wmma:' run.txt | grep -q 'nn.model:80 causal_attention' &&
   grep -q 'cuda profile' out/gpt2-profile-wmma.txt &&
   grep -A2 'with SHARDC_CUDA_ATTN=mma:' run.txt | grep -q 'nn.model:80 causal_attention' &&
   grep -q 'cuda profile' out/gpt2-profile-mma.txt"
check "dp=2 on one device: NCCL's refusal names --comm mpi, and the MPI path matches one rank" bash -c \
  "grep -q \"^ok   NCCL's refusal says to use --comm mpi\" run.txt &&
   grep -q '^ok   dp=2 on one GPU over MPI path (--comm mpi) matches one rank' run.txt"
check "bf16 dp=2 with ZeRO-1 over --comm mpi matches it without ZeRO" \
  grep -q "^ok   bf16 dp=2 with ZeRO-1 (parameters gathered during the forward, over --comm mpi) matches it without ZeRO" run.txt
check "bf16 tp=2 with sequence parallelism over --comm mpi within 2e-2 of one host rank" \
  grep -q "^ok   bf16 tp=2 with sequence parallelism (bf16 collectives, --comm mpi) within 2e-2 of one host rank" run.txt
check "bf16 tp=2 (the input-gradient all-reduces overlapped) within 2e-2 of one host rank, and the same with SHARDC_CUDA_TP_OVERLAP=0" \
  bash -c "grep -q '^ok   bf16 tp=2 (input-gradient all-reduces during the weight gradients, --comm mpi) within 2e-2 of one host rank' run.txt &&
    grep -q '^ok   bf16 tp=2 with SHARDC_CUDA_TP_OVERLAP=0: the same losses exactly' run.txt &&
    grep -q '^ok   bf16 tp=2 with sequence parallelism with SHARDC_CUDA_TP_OVERLAP=0: the same losses exactly' run.txt"
check "pp=2 with recomputation over --comm mpi matches one rank" \
  grep -q "^ok   pp=2 with recomputation on one GPU (--comm mpi) matches one rank" run.txt
check "bf16 pp=2 (bf16 boundaries) over --comm mpi within 2e-2 of one host rank" \
  grep -q "^ok   bf16 pp=2 (bf16 boundaries, --comm mpi) within 2e-2 of one host rank" run.txt
check "one GPU: the several-GPU layouts are left out, said so, no FAIL" \
  grep -q "^   one GPU: left out (the pipeline's channels, NCCL between devices" run.txt
check "exit status 1 (the MFU target) and exactly one FAIL (got $rc, $(grep -c '^FAIL' run.txt))" \
  bash -c "[ $rc -eq 1 ] && [ \$(grep -c '^FAIL' run.txt) -eq 1 ]"
grep -E "^(==|ok|FAIL)" run6.txt | sed 's/^/   | /'
for l in "pp=2 1F1B (over the pipeline channels)" "pp=2 interleaved (2 virtual stages), 4 microbatches" \
  "dp=2 x pp=2 interleaved, 4 microbatches" "tp=2 x pp=2 with sequence parallelism" "dp=2 x tp=2 x pp=2, ZeRO-1 (8 ranks)"; do
  check "8 GPUs: $l over NCCL within 1e-4 of one host rank, and --comm mpi's losses" bash -c \
    "grep -qF 'ok   $l over NCCL within 1e-4 of one host rank' run6.txt &&
     grep -qF \"ok   $l: NCCL's losses are --comm mpi's (1e-5)\" run6.txt"
done
check "8 GPUs: pp=2 without the channels, the same losses; bf16 at 8 ranks within 2e-2 of one host rank" bash -c \
  "grep -qF 'ok   pp=2 1F1B without the channels (SR_COMM_PP_CHANNELS=0): the same losses' run6.txt &&
   grep -qF 'ok   bf16 dp=2 x tp=2 x pp=2, ZeRO-1 (8 ranks) over NCCL within 2e-2 of one host rank' run6.txt"
check "8 GPUs: GPT-2 at --dp 8, with and without ZeRO-1: 43.9% MFU per GPU, 90.0% of one GPU's tokens/s" bash -c \
  "[ \$(grep -c '^   MFU per GPU 43.9% of 989 TFLOP/s; 540000 tokens/s per GPU, 90.0% of one GPU.s' run6.txt) -eq 2 ] &&
   grep -q '^ok   GPT-2 data-parallel on 8 GPUs (ZeRO-0) trained 14 steps' run6.txt &&
   grep -q '^ok   GPT-2 data-parallel on 8 GPUs (ZeRO-1) trained 14 steps' run6.txt && [ -s out6/gpt2-dp8-zero1.jsonl ]"
check "8 GPUs: 12 runs, 12 comparisons of 2 losses, no FAIL, exit status 0 (got $rc6)" bash -c \
  "[ $rc6 -eq 0 ] && [ \$(grep -c '^   steps 2/2' run6.txt) -eq 12 ] && ! grep -q '^FAIL' run6.txt"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
