#!/bin/bash
# comm_mpi.sh GEN_CUDA SHARDC SRCDIR [NVCC_EXAMPLES_DIR]: a CUDA program's
# --comm mpi (collectives over MPI, device buffers staged through host
# memory), on the CPU emulator under mpirun, against the host binary:
#  - dp=2 (--comm mpi), tp=2 (SHARDC_COMM=mpi, the environment form) and
#    pp=2 (--comm mpi, 1f1b) give the host binary's losses to 1e-5;
#  - --comm nccl is a usage error (exit 2, one error line, also from two
#    ranks) on a host build; SHARDC_COMM=nccl too; a value other than nccl
#    or mpi too; the flag wins over the environment;
#  - on an emulated CUDA build --comm nccl runs the NCCL backend over the
#    emulator's NCCL (MPI underneath): dp=2 matches the host binary; ranks
#    that share a GPU (EMU_SHARED_GPU=1) get the error that says --comm mpi;
#  - --help shows --comm with the build's default (mpi on the host, nccl
#    for CUDA, emulated or nvcc-built when NVCC_EXAMPLES_DIR has them).
source "$(dirname "$0")/lib.sh"
ex=${4:-}
# usage error: exit 2, exactly one "error:" line, saying $2 ($1: the output)
usage_err() { [ "$3" -eq 2 ] && [ "$(grep -c 'error:' "$1")" -eq 1 ] && grep -qF -- "$2" "$1"; }
mpi() { mpirun --oversubscribe -np 2 "$@"; }
opts="--data text.txt --batch 8 --seq 32 --lr 1e-3 --warmup 2 --steps 4 --quiet"

check "builds: tinygpt for the host and emulated CUDA, plain, --tp 2 and --pp 2" builds \
  "'$shardc' build '$m' -o tg_host" "'$gen' '$m' --cuda tg.cu --build tg_cuda --emulate" \
  "'$shardc' build '$m' --tp 2 -o tp_host" "'$gen' '$m' --tp 2 --cuda tp.cu --build tp_cuda --emulate" \
  "'$shardc' build '$m' --pp 2 -o pp_host" "'$gen' '$m' --pp 2 --cuda pp.cu --build pp_cuda --emulate"

# ---- the MPI path trains as the host binary does --------------------------------------
./tg_host $opts --log h1.jsonl
mpi ./tg_cuda $opts --dp 2 --comm mpi --log dp.jsonl
losses h1.jsonl > h1.txt; losses dp.jsonl > dp.txt
check "dp=2 --comm mpi: 4 steps match one host rank to 1e-5" close h1.txt dp.txt 1e-5

mpi ./tp_host $opts --tp 2 --log htp.jsonl
SHARDC_COMM=mpi mpi -x SHARDC_COMM ./tp_cuda $opts --tp 2 --log tp.jsonl
losses htp.jsonl > htp.txt; losses tp.jsonl > tp.txt
check "tp=2 SHARDC_COMM=mpi: 4 steps match the host binary's tp=2 to 1e-5" close htp.txt tp.txt 1e-5

mpi ./pp_host $opts --pp 2 --microbatches 2 --log hpp.jsonl
mpi ./pp_cuda $opts --pp 2 --microbatches 2 --comm mpi --log pp.jsonl
losses hpp.jsonl > hpp.txt; losses pp.jsonl > pp.txt
check "pp=2 (1f1b) --comm mpi: 4 steps match the host binary's pp=2 to 1e-5" close hpp.txt pp.txt 1e-5

# ---- --comm nccl where there is no NCCL -----------------------------------------------
./tg_host $opts --comm nccl 2> e1.txt; rc=$?
check "host build, --comm nccl: usage error ($(head -1 e1.txt))" \
  usage_err e1.txt "error: --comm nccl: this program was built for the CPU (shardc build --backend host)" $rc
check "... which says to use --comm mpi" grep -q "use --comm mpi$" e1.txt
mpi ./tg_host $opts --comm nccl > e2.txt 2>&1; rc=$?
check "host build, --comm nccl on two ranks: one error line, exit 2 (got $rc)" \
  usage_err e2.txt "error: --comm nccl:" $rc
SHARDC_COMM=nccl ./tg_host $opts 2> e3.txt; rc=$?
check "host build, SHARDC_COMM=nccl: usage error naming SHARDC_COMM ($(head -1 e3.txt))" \
  usage_err e3.txt "error: SHARDC_COMM=nccl: this program was built for the CPU" $rc
SHARDC_COMM=nccl ./tg_host $opts --comm mpi --log flag.jsonl 2> e4.txt; rc=$?
check "host build, SHARDC_COMM=nccl --comm mpi: the flag wins (exit $rc)" [ $rc -eq 0 ]
mpi ./tg_cuda $opts --dp 2 --comm nccl --log dpn.jsonl
losses dpn.jsonl > dpn.txt
check "dp=2 --comm nccl (the emulator's NCCL): 4 steps match one host rank to 1e-5" close h1.txt dpn.txt 1e-5
mpi -x EMU_SHARED_GPU=1 ./tg_cuda $opts --dp 2 --comm nccl > e5.txt 2>&1; rc=$?
check "two ranks on one (emulated) GPU over NCCL: exit $rc, the error names both ranks and says --comm mpi ($(grep -m1 error: e5.txt | head -c 200))" \
  bash -c "[ $rc -ne 0 ] && grep -q 'are both on GPU emu-shared' e5.txt && grep -q -- '--comm mpi' e5.txt"
./tg_cuda $opts --comm gloo 2> e6.txt; rc=$?
check "--comm gloo: usage error ($(head -1 e6.txt))" usage_err e6.txt "--comm must be nccl or mpi (got 'gloo')" $rc

# ---- --help -----------------------------------------------------------------------------
check "host --help: --comm, default mpi, and SHARDC_COMM" bash -c \
  "./tg_host --help | grep -qE -- '--comm nccl\|mpi .*\(default mpi\)' && ./tg_host --help | grep -q SHARDC_COMM"
check "emulated CUDA --help: --comm, default nccl" bash -c "./tg_cuda --help | grep -qE -- '--comm nccl\|mpi .*\(default nccl\)'"
check "CUDA --help names the CUDA settings (SHARDC_CUDA_ATTN and its default, auto); the host's does not" bash -c \
  "./tg_cuda --help | grep -q 'SHARDC_CUDA_ATTN=auto|wmma|mma|cudnn|simt' && ./tg_cuda --help | grep -q SHARDC_CUDA_PROFILE=1 &&
   ! ./tg_host --help | grep -q SHARDC_CUDA"
if [ -n "$ex" ] && [ -x "$ex/tinygpt_fp32" ]; then
  check "nvcc-built CUDA --help: --comm, default nccl" bash -c \
    "'$ex/tinygpt_fp32' --help | grep -qE -- '--comm nccl\|mpi .*\(default nccl\)'"
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
