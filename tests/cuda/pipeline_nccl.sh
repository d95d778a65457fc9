#!/bin/bash
# pipeline_nccl.sh GEN_CUDA SHARDC SRCDIR: every pipeline schedule at pp=4
# (gpipe, 1f1b, zb-h1, interleaved with 2 virtual stages) on the emulated
# CUDA binary over the NCCL backend, whose emulator keeps what could hang
# them on a GPU: a rank's sends and receives on one communicator run one at
# a time and a send waits for its receiver. Each run must finish (bounded by
# --comm-timeout: a deadlock is an error, not a hang), give exactly the
# losses of the same binary over --comm mpi (which has neither constraint),
# and stay within 1e-4 of the host binary (CUDA kernels add in another order).
# Each run evaluates too (steps 0 and 3), the validation microbatches flowing
# through the stages together (runtime/pipeline.c rt_pipe_eval).
# 1F1B once more with block recomputation: its clones run in the rank's
# shared scratch (memplan.c), which each microbatch's backward reuses.
# dp=2 x pp=2 (1f1b, zb-h1): the gradient all-reduce runs during the backward;
# with ZeRO-1 (1f1b) the reduce-scatter, the tied embedding's buckets after its
# sum over the pipeline.
# dp=2 x tp=2 x pp=2 on 8 ranks (sequence parallelism, ZeRO-1): the issue's
# `mpirun -np 8 BIN --dp 2 --tp 2 --pp 2`, NCCL on all three groups.
# Interleaved with more microbatches than stages (pp=4 with 8, dp=2 x pp=2 with 4), which
# on one NCCL communicator would deadlock: the grid's pipeline channels run it; without them
# (SR_COMM_PP_CHANNELS=0) 1F1B runs and that layout is refused.
source "$(dirname "$0")/lib.sh"
cfg="--set n_layer=4 --set n_embd=64 --set n_head=4"
cfg8="--set n_layer=8 --set n_embd=64 --set n_head=4"
cu="--backend cuda --cuda-emulate"
check "builds: host and emulated CUDA, pp=4 (plain, zb-h1, interleaved x 2, recompute), pp=2 (1f1b, zb-h1, interleaved), tp=2 x pp=2 (sequence parallelism)" builds \
  "'$shardc' build '$m' $cfg -o h4" "'$shardc' build '$m' $cfg8 -o h8" \
  "'$shardc' build '$m' $cfg $cu --pp 4 -o c4" "'$shardc' build '$m' $cfg $cu --pp 4 --schedule zb-h1 -o c4z" \
  "'$shardc' build '$m' $cfg8 $cu --pp 4 --virtual-stages 2 --schedule interleaved -o c4v" \
  "'$shardc' build '$m' $cfg8 $cu --pp 2 --virtual-stages 2 --schedule interleaved -o c2v" \
  "'$shardc' build '$m' $cfg $cu --pp 4 --recompute block -o c4r" \
  "'$shardc' build '$m' $cfg $cu --pp 2 -o c2" "'$shardc' build '$m' $cfg $cu --pp 2 --schedule zb-h1 -o c2z" \
  "'$shardc' build '$m' $cfg $cu --tp 2 --pp 2 --sequence-parallel -o c8"
run="--data text.txt --batch 8 --seq 32 --steps 3 --lr 3e-3 --warmup 2 --microbatches 4 --quiet --comm-timeout 30
  --val-data text.txt --eval-every 3 --eval-batches 2"
vlosses() { grep -o '"val_loss":[^}]*' "$1" | cut -d: -f2; }
mpi4() { timeout 300 mpirun --oversubscribe --bind-to none -np 4 "$@"; }
./h4 $run --log h4.jsonl; ./h8 $run --log h8.jsonl
losses h4.jsonl > h4.txt; losses h8.jsonl > h8.txt
for s in gpipe 1f1b zb-h1 interleaved 1f1b+recompute; do
  bin=./c4; ref=h4.txt
  [ $s = zb-h1 ] && bin=./c4z
  [ $s = 1f1b+recompute ] && bin=./c4r
  [ $s = interleaved ] && bin=./c4v && ref=h8.txt
  sc=${s%+recompute}
  mpi4 $bin $run --pp 4 --schedule $sc --comm nccl --log n.jsonl > n.err 2>&1; rn=$?
  mpi4 $bin $run --pp 4 --schedule $sc --comm mpi --log p.jsonl > p.err 2>&1; rp=$?
  check "pp=4 $s over NCCL finishes (exit $rn; $(grep -m1 -i error n.err | head -c 160))" [ $rn -eq 0 ]
  check "pp=4 $s over --comm mpi finishes (exit $rp)" [ $rp -eq 0 ]
  losses n.jsonl > n.txt; losses p.jsonl > p.txt; cp p.txt "p_$s.txt"
  check "pp=4 $s: NCCL gives the MPI path's losses exactly ($(tr '\n' ' ' < n.txt))" cmp -s n.txt p.txt
  check "pp=4 $s: within 1e-4 of the host binary" close $ref n.txt 1e-4
  vlosses n.jsonl > nv.txt; vlosses p.jsonl > pv.txt; vlosses ${ref%.txt}.jsonl > hv.txt
  check "pp=4 $s: the validation losses (microbatches in flight together) over NCCL are the MPI path's ($(tr '\n' ' ' < nv.txt))" \
    bash -c "[ \$(wc -l < nv.txt) = 2 ] && cmp -s nv.txt pv.txt"
  check "pp=4 $s: validation losses within 1e-4 of the host binary" close hv.txt nv.txt 1e-4
done
# the interleaved schedule with more microbatches than stages: in its steady state two
# neighbours each send before they receive, which on one NCCL communicator (a rank's transfers
# in issue order, a send until its receiver takes it) waits forever; the grid's pipeline
# channels (a communicator per direction and kind) keep the transfers apart. 8 microbatches on
# 4 stages, and dp=2 x pp=2 (two pipeline groups, their channels made in the same rounds) with 4
for l in "4 8" "2 4"; do
  read -r np mb <<< "$l"; bin=./c4v; lay="--pp 4"; [ $np = 2 ] && bin=./c2v && lay="--dp 2 --pp 2"
  mpi4 $bin ${run%%--val-data*} $lay --microbatches $mb --schedule interleaved --comm nccl --log n.jsonl > n.err 2>&1; rn=$?
  mpi4 $bin ${run%%--val-data*} $lay --microbatches $mb --schedule interleaved --comm mpi --log p.jsonl > p.err 2>&1; rp=$?
  losses n.jsonl > n.txt; losses p.jsonl > p.txt
  check "$lay interleaved with $mb microbatches over NCCL finishes (exit $rn; $(grep -m1 -i error n.err | head -c 160))" \
    [ $rn -eq 0 ]
  check "$lay interleaved with $mb microbatches: NCCL gives the MPI path's losses exactly ($(tr '\n' ' ' < n.txt))" \
    bash -c "[ $rp -eq 0 ] && [ \$(wc -l < n.txt) = 3 ] && cmp -s n.txt p.txt"
done
# without the channels (SR_COMM_PP_CHANNELS=0, the way back should they misbehave): one
# communicator, each send launched in a group with the recv after it; 1F1B runs with the same
# losses, the interleaved schedule with more microbatches than stages is refused in one line
SR_COMM_PP_CHANNELS=0 mpi4 ./c4 ${run%%--val-data*} --pp 4 --schedule 1f1b --comm nccl --log n.jsonl > n.err 2>&1; rn=$?
losses n.jsonl > n.txt
check "pp=4 1f1b over NCCL without the channels: the MPI path's losses exactly (exit $rn; $(tr '\n' ' ' < n.txt))" \
  bash -c "[ $rn -eq 0 ] && cmp -s n.txt p_1f1b.txt"
SR_COMM_PP_CHANNELS=0 mpi4 ./c4v ${run%%--val-data*} --pp 4 --microbatches 8 --comm nccl > n.err 2>&1; rn=$?
check "pp=4 interleaved with 8 microbatches over NCCL without the channels: refused, exit 2 ($(grep -m1 error n.err | head -c 120))" \
  bash -c "[ $rn -eq 2 ] && grep -q 'would deadlock over NCCL without the pipeline.s channels' n.err"
# a bf16 program's boundaries are bf16: stage 1 of 4 receives, each step, 4
# microbatches' activations and gradients of 2 x 32 rows x 64 at 2 bytes
mpi4 ./c4 ${run%%--val-data*} --pp 4 --comm nccl --comm-stats "st%r.txt" > n.err 2>&1
check "pp=4 (bf16): stage 1 receives bf16 boundaries: 24 recvs of 4096 elements, 196608 bytes in 3 steps ($(grep recv st1.txt))" \
  grep -qx "pipeline recv calls 24 bytes 196608" st1.txt
# every stage's transfers are what shardc plan --precision bf16 says: the boundaries at 2
# bytes an element, the tied embedding's gradient summed between stages 0 and 3 at 4 (float)
"$shardc" plan "$m" $cfg --pp 4 --gpus 4 --batch 8 --seq 32 --microbatches 4 --precision bf16 --json > p4.json
check "pp=4 (bf16): every stage's pipeline transfers are shardc plan --precision bf16's ($(grep -h pipeline st0.txt st3.txt | tr '\n' ';'))" \
  $py "$src/tests/plan/counters.py" p4.json "st%r.txt" --ranks 4 --groups pipeline
# dp=2 x pp=2: each chunk's last gradient pass starts the all-reduce of its
# buckets (ZeRO-1: the reduce-scatter) on the data communicator (small
# buckets: many), between the pipeline's transfers on the other communicator
for s in 1f1b zb-h1 "1f1b --zero 1"; do
  bin=./c2; [ "$s" = zb-h1 ] && bin=./c2z
  mpi4 $bin $run --dp 2 --pp 2 --schedule $s --bucket-mb 0.05 --comm nccl --log n.jsonl > n.err 2>&1; rn=$?
  mpi4 $bin $run --dp 2 --pp 2 --schedule $s --bucket-mb 0.05 --comm mpi --log p.jsonl > p.err 2>&1; rp=$?
  check "dp=2 x pp=2 $s over NCCL finishes (exit $rn; $(grep -m1 -i error n.err | head -c 160))" [ $rn -eq 0 ]
  check "dp=2 x pp=2 $s over --comm mpi finishes (exit $rp)" [ $rp -eq 0 ]
  losses n.jsonl > n.txt; losses p.jsonl > p.txt
  check "dp=2 x pp=2 $s: NCCL gives the MPI path's losses exactly ($(tr '\n' ' ' < n.txt))" cmp -s n.txt p.txt
  check "dp=2 x pp=2 $s: within 1e-4 of the host binary" close h4.txt n.txt 1e-4
done
# the issue's layout, mpirun -np 8 BIN --dp 2 --tp 2 --pp 2: every collective and
# transfer over NCCL (the tensor group's with sequence parallelism, ZeRO-1's
# reduce-scatter and parameter gather on the data group, the stages' sends)
mpi8() { timeout 300 mpirun --oversubscribe --bind-to none -np 8 "$@"; }
l8="--dp 2 --tp 2 --pp 2 --zero 1 --bucket-mb 0.05"
mpi8 ./c8 $run $l8 --comm nccl --log n.jsonl > n.err 2>&1; rn=$?
mpi8 ./c8 $run $l8 --comm mpi --log p.jsonl > p.err 2>&1; rp=$?
check "dp=2 x tp=2 x pp=2 (8 ranks, ZeRO-1) over NCCL finishes (exit $rn; $(grep -m1 -i error n.err | head -c 160))" \
  [ $rn -eq 0 ]
check "dp=2 x tp=2 x pp=2 over --comm mpi finishes (exit $rp)" [ $rp -eq 0 ]
losses n.jsonl > n.txt; losses p.jsonl > p.txt
check "dp=2 x tp=2 x pp=2: NCCL gives the MPI path's losses exactly ($(tr '\n' ' ' < n.txt))" cmp -s n.txt p.txt
check "dp=2 x tp=2 x pp=2: within 1e-4 of one host rank" close h4.txt n.txt 1e-4
vlosses n.jsonl > nv.txt; vlosses p.jsonl > pv.txt; vlosses h4.jsonl > hv.txt
check "dp=2 x tp=2 x pp=2: the validation losses over NCCL are the MPI path's ($(tr '\n' ' ' < nv.txt))" \
  bash -c "[ \$(wc -l < nv.txt) = 2 ] && cmp -s nv.txt pv.txt"
check "dp=2 x tp=2 x pp=2: validation losses within 1e-4 of one host rank" close hv.txt nv.txt 1e-4
# every rank's training traffic in each group (tensor: bf16 activations; pipeline: bf16
# boundaries, the tied embedding's fp32 gradient; data: ZeRO-1's fp32 gradients and weights, in
# the CUDA program's arena of 256-byte aligned tensors) is what shardc plan --precision bf16 says
# for its stage, to the byte; the tensor all-reduces (the sequence-parallel parameter gradients'
# fp32 sums, of the part in the rank's ZeRO-1 shard) at most what it says (docs/plan.md, Limits).
# The evaluation's traffic counts too: run once more without it
mpi8 ./c8 ${run%%--val-data*} $l8 --comm nccl --comm-stats "s8_%r.txt" > n.err 2>&1
"$shardc" plan "$m" $cfg $l8 --sequence-parallel --gpus 8 --batch 8 --seq 32 --microbatches 4 --precision bf16 \
  --json > p8.json
check "dp=2 x tp=2 x pp=2: every rank's collectives and transfers are shardc plan --precision bf16's ($(grep -h -v -e steps -e peak s8_0.txt | tr '\n' ';'))" \
  $py "$src/tests/plan/counters.py" p8.json "s8_%r.txt" --ranks 8 --at-most tensor.allreduce
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
