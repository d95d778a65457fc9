#!/bin/bash
# train_emu.sh GEN_CUDA SHARDC SRCDIR: the CUDA program of tinygpt, built
# against the CPU emulator, trained by the runtime's driver exactly as the
# GPU binary would be, against the host binary:
#  - fp32 losses equal the host's to 1e-5 relative (with dropout: same masks);
#  - a checkpoint the CUDA binary saves continues on the host binary;
#  - bf16 losses within 2e-2;
#  - data parallelism (dp=2, with ZeRO-1), tensor parallelism (tp=2, with
#    and without sequence parallelism, the latter with 2 microbatches),
#    pipeline parallelism (pp=2, 1f1b and zb-h1) and tp=2 x pp=2 with
#    sequence parallelism over the comm layer's NCCL backend (the default,
#    as on a GPU: runtime/cuda/comm_nccl.c on the emulator's NCCL, which
#    is MPI underneath);
#    recomputation (fp32, and bf16 with d matmul + d gelu fused); bf16 at tp=2 (its column-
#    parallel input gradients' all-reduces during the weight gradients' GEMMs, or after them;
#    the emulator's race check names a mutated overlap's race); with sequence parallelism the
#    reduce-scatters during those GEMMs, or after them;
#  - greedy sampling from the bf16 program (bf16 logits), at tp=1 and tp=2;
#  - a LLaMA-style model (RoPE, RMSNorm, SwiGLU) in fp32, bf16 and at tp=2;
#  - SHARDC_CUDA_PROFILE=1 reports every generated call site and changes no loss;
#  - without a GPU (EMU_DEVICES=0) the binary says so in one line, exit 1.
source "$(dirname "$0")/lib.sh"
opts="--data text.txt --batch 4 --seq 32 --lr 1e-3 --warmup 2 --quiet"
# bf16 runs compared with each other take one attention path: the default (auto) picks by the
# trial's times, which on the emulator say nothing; auto is checked at its own lines below
export SHARDC_CUDA_ATTN=wmma

lm="$src/tests/e2e/llama.model"
# the programs below, built first, as many at once as there are cores (g++ compiles of seconds each)
check "builds: tinygpt and a LLaMA-style model, host and emulated CUDA (fp32, bf16, tp=2, a padded vocabulary, sequence parallelism, tp=2 x pp=2, pp=2 1f1b and zb-h1, recomputation)" builds \
  "'$gen' '$m' --cuda tg.cu --build tg_cuda --emulate" "'$gen' '$m' --bf16 --cuda tgb.cu --build tgb_cuda --emulate" \
  "'$shardc' build '$m' -o tg_host" \
  "'$gen' '$m' --tp 2 --cuda tg2.cu --build tg2_cuda --emulate" "'$shardc' build '$m' --tp 2 -o tg2_host" \
  "'$gen' '$m' --bf16 --tp 2 --cuda tg2b.cu --build tg2b_cuda --emulate" \
  "'$gen' '$m' --tp 2 --set make_vocab_size_divisible_by=384 --cuda vp.cu --build vp_cuda --emulate" \
  "'$gen' '$m' --tp 2 --sequence-parallel --cuda sp.cu --build sp_cuda --emulate" \
  "'$shardc' build '$m' --tp 2 --sequence-parallel -o sp_host" \
  "'$gen' '$m' --tp 2 --pp 2 --sequence-parallel --cuda sp3.cu --build sp3_cuda --emulate" \
  "'$shardc' build '$m' --tp 2 --pp 2 --sequence-parallel -o sp3_host" \
  "'$shardc' build '$m' --pp 2 -o pp_host" \
  "'$gen' '$m' --pp 2 --schedule 1f1b --cuda pp-1f1b.cu --build pp_cuda_1f1b --emulate" \
  "'$gen' '$m' --pp 2 --schedule zb-h1 --cuda pp-zb-h1.cu --build pp_cuda_zb-h1 --emulate" \
  "'$gen' '$lm' --cuda ll.cu --build ll_cuda --emulate" "'$gen' '$lm' --bf16 --cuda llb.cu --build llb_cuda --emulate" \
  "'$shardc' build '$lm' -o ll_host" "'$gen' '$lm' --tp 2 --cuda ll2.cu --build ll2_cuda --emulate" \
  "'$gen' '$m' --recompute --cuda rc.cu --build rc_cuda --emulate" \
  "'$gen' '$m' --bf16 --recompute --cuda rcb.cu --build rcb_cuda --emulate"

./tg_host $opts --steps 6 --dropout 0.1 --log host.jsonl
./tg_cuda $opts --steps 6 --dropout 0.1 --log cuda.jsonl --save ck --save-every 3
losses host.jsonl > h.txt; losses cuda.jsonl > c.txt
check "fp32: 6 steps (dropout 0.1) match the host binary to 1e-5" close h.txt c.txt 1e-5
./tg_host $opts --steps 6 --dropout 0.1 --load ck/step-00000003 --log resumed.jsonl
losses resumed.jsonl > r.txt; tail -3 c.txt > c3.txt
check "a checkpoint saved by the CUDA binary continues on the host binary" close c3.txt r.txt 1e-5

./tgb_cuda $opts --steps 6 --dropout 0.1 --log bf16.jsonl
losses bf16.jsonl > b.txt
check "bf16: 6 steps within 2e-2 of the host binary" close h.txt b.txt 2e-2
# JSON Lines prompt-completion records: a prompt token's target is -1, the loss kernels leave
# it out, and the loss is the mean over the completion tokens (fp32 and bf16; tp=2 below)
$py "$src/tests/records.py" text.txt rec.jsonl 300 3 80 30
ropts="--data rec.jsonl --batch 4 --seq 32 --lr 1e-3 --warmup 2 --quiet --steps 4"
./tg_host $ropts --log rh.jsonl; ./tg_cuda $ropts --log rc.jsonl; ./tgb_cuda $ropts --log rb.jsonl
losses rh.jsonl > rh.txt; losses rc.jsonl > rc.txt; losses rb.jsonl > rb.txt
check "records (loss on completions): fp32 matches the host binary to 1e-5" close rh.txt rc.txt 1e-5
check "records: bf16 within 2e-2 of the host binary" close rh.txt rb.txt 2e-2
# bf16: the bias gradients come out of the weight gradients' GEMMs (each of the 16 bias adds'
# backward fused with its d matmul, 4 with the gelu too); SHARDC_CUDA_BGRAD=0 sums them apart:
# the same up to the sums' order
check "bf16: the bias gradients in the weight GEMMs' epilogues (d add+matmul sites)" \
  bash -c "[ \$(grep -c 'srk_matmul_bias_bwd(' tgb.cu) -eq 12 ] && [ \$(grep -c 'SRK_AT(\"nn.model:27 d add+matmul+gelu\"' tgb.cu) -eq 4 ]"
SHARDC_CUDA_BGRAD=0 ./tgb_cuda $opts --steps 6 --dropout 0.1 --log bf16apart.jsonl
losses bf16apart.jsonl > ba.txt
check "bf16 with SHARDC_CUDA_BGRAD=0 (bias gradients apart): 6 steps within 1e-4 of the fused" close b.txt ba.txt 1e-4
SHARDC_CUDA_ATTN=mma ./tgb_cuda $opts --steps 6 --dropout 0.1 --log bf16mma.jsonl
losses bf16mma.jsonl > bm.txt
check "bf16 with the mma.sync attention (SHARDC_CUDA_ATTN=mma, hd 32): 6 steps within 2e-2 of the host binary" \
  close h.txt bm.txt 2e-2
# the default, SHARDC_CUDA_ATTN=auto: the attention trial's line after the first step (a time for
# wmma and for mma.sync, both agreeing with simt; no cuDNN in the emulator's runtime), one line,
# and the losses of whichever path it took
env -u SHARDC_CUDA_ATTN ./tgb_cuda ${opts/--quiet/} --steps 6 --dropout 0.1 --log bf16auto.jsonl > auto.out 2> auto.err
losses bf16auto.jsonl > bauto.txt
check "bf16 with the default attention (auto): the trial's verdict, one line ($(grep -m1 'attention (' auto.err | head -c 400))" \
  bash -c "[ \$(grep -c '^attention (' auto.err) -eq 1 ] && grep -q '^attention (4 heads of 32, q|k|v packed; tried at batch 4 x 32, forward and backward): wmma [0-9.]* ms (differs [0-9.e+-]*); mma.sync [0-9.]* ms (differs [0-9.e+-]*); cudnn unavailable (.*); using \(wmma\|mma.sync\)$' auto.err && ! grep -q 'differs from simt' auto.err"
check "bf16 with the default attention (auto): 6 steps within 2e-2 of the host binary" close h.txt bauto.txt 2e-2
env -u SHARDC_CUDA_ATTN ./tgb_cuda $opts --steps 1 > autoq.out 2> autoq.err
check "auto under --quiet: nothing printed" bash -c "! [ -s autoq.err ] && ! [ -s autoq.out ]"

if command -v mpirun >/dev/null; then
  ./tg_host $opts --batch 8 --steps 4 --log h1.jsonl
  mpirun --oversubscribe -np 2 ./tg_cuda ${opts/--quiet/} --batch 8 --steps 4 --dp 2 --log cd.jsonl 2> cd.err
  check "dp=2 runs over NCCL by default ($(grep -m1 communication: cd.err))" grep -q "^communication: NCCL" cd.err
  mpirun --oversubscribe -np 2 ./tg_cuda $opts --batch 8 --steps 4 --dp 2 --zero 1 --log cz.jsonl
  losses h1.jsonl > h1.txt; losses cd.jsonl > cd.txt; losses cz.jsonl > cz.txt
  check "dp=2 over NCCL (bucketed all-reduce from grad_ready): 4 steps match one host rank to 1e-5" close h1.txt cd.txt 1e-5
  check "dp=2 with ZeRO-1 over NCCL: 4 steps match one host rank to 1e-5" close h1.txt cz.txt 1e-5
  # --time-limit (2.4 s) on two ranks over NCCL: both stop after the same step, its checkpoint
  # saved from device memory (ZeRO-1's optimizer state gathered), exit 3
  mpirun --oversubscribe -np 2 ./tg_cuda $opts --batch 8 --steps 100000 --dp 2 --zero 1 --time-limit 0.04 \
    --save tl --log tl.jsonl > /dev/null 2> tl.err; rc=$?; n=$(grep -c '"loss"' tl.jsonl)
  check "--time-limit over NCCL with ZeRO-1: exit 3 after $n steps (rc $rc), the checkpoint of step $n the latest" \
    bash -c "[ $rc -eq 3 ] && [ $n -ge 1 ] && [ \"\$(cat tl/latest)\" = step-$(printf %08d $n) ] &&
             grep -q 'stopped by --time-limit 0.04 .* after step $n of 100000: checkpoint tl/' tl.err"
  # bf16 with ZeRO-1: what shardc plan --precision bf16 says the program holds and moves (fp32
  # weights and their bf16 copy, fp32 gradients reduce-scattered in buckets, Adam m and v
  # sharded, the fp32 weights gathered), against the runtime's counters and its memory line, and
  # its total against the device arena's peak (within 5%)
  mpirun --oversubscribe -np 2 ./tgb_cuda ${opts/--quiet/} --batch 8 --steps 4 --dp 2 --zero 1 --bucket-mb 0.05 \
    --log czb.jsonl --comm-stats czb.stats > /dev/null 2> czb.err
  losses czb.jsonl > czb.txt
  check "bf16 dp=2 with ZeRO-1 over NCCL: 4 steps within 2e-2 of one host rank" close h1.txt czb.txt 2e-2
  "$shardc" plan "$m" --dp 2 --zero 1 --gpus 2 --batch 8 --seq 32 --bucket-mb 0.05 --precision bf16 --json > pzb.json
  check "bf16 dp=2 ZeRO-1: the data group's collectives are shardc plan --precision bf16's ($(grep data czb.stats | tr '\n' ';'))" \
    $py "$src/tests/plan/counters.py" pzb.json czb.stats --groups data
  check "bf16 dp=2 ZeRO-1: the model states are the plan's, the arena's peak within 5% of its total ($(grep -m1 '^rank 0 ' czb.err))" \
    $py - pzb.json czb.stats czb.err "$src/tests/plan" <<'PY'
import json, re, sys
sys.path.insert(0, sys.argv[4])
from counters import read_stats
r = json.load(open(sys.argv[1]))['roles'][0]
good = True
m = re.search(r'rank 0 .*parameters ([0-9.]+) MiB, gradients ([0-9.]+) MiB, optimizer state ([0-9.]+) MiB, '
              r'activations [0-9.]+ MiB \(the parameters in fp32 and a bf16 copy\)', open(sys.argv[3]).read())
if not m:
    print("   no memory line (with the bf16 copy) from the runtime"); sys.exit(1)
for name, x in zip(('weights', 'gradients', 'optimizer'), m.groups()):
    if abs(float(x) - r['memory'][name] / 2**20) > 0.01:
        print("   %s: runtime %s MiB, plan %.2f MiB" % (name, x, r['memory'][name] / 2**20)); good = False
# the whole: the device arena's peak (the CUDA workspace's slots are not the plan's to the byte)
peak = read_stats(sys.argv[2])[1]
print("   peak allocated %s bytes, plan total %d" % (peak, r['memory']['total']))
if peak is None or abs(peak / r['memory']['total'] - 1) > 0.05:
    good = False
sys.exit(0 if good else 1)
PY
  check "tp=2: the vocab-parallel embedding's sites name the op the .model wrote (embedding, not \$embedding_vp)" \
    bash -c "grep -q 'SRK_AT(\"nn.model:70 embedding\"' tg2.cu && grep -q 'SRK_AT(\"nn.model:70 d embedding\"' tg2.cu && ! grep -q 'SRK_AT(\"[^\"]*\\\$embedding_vp' tg2.cu"
  mpirun --oversubscribe -np 2 ./tg2_host $opts --tp 2 --steps 4 --log h2.jsonl
  mpirun --oversubscribe -np 2 ./tg2_cuda $opts --tp 2 --steps 4 --log c2.jsonl
  losses h2.jsonl > h2.txt; losses c2.jsonl > c2.txt
  check "tp=2 over NCCL: 4 steps match the host binary's tp=2 to 1e-5" close h2.txt c2.txt 1e-5
  mpirun --oversubscribe -np 2 ./tg2_cuda $ropts --tp 2 --log rc2.jsonl
  losses rc2.jsonl > rc2.txt
  check "tp=2 over NCCL on records: the vocab-parallel loss leaves the prompts out as the single host rank" \
    close rh.txt rc2.txt 1e-5
  # a padded vocabulary (256 + 128 padding columns; rank 1's 192 columns hold 64 classes): the
  # vocab-parallel loss kernels leave the padding out, as the unpadded host run
  mpirun --oversubscribe -np 2 ./vp_cuda $opts --tp 2 --steps 4 --log cv.jsonl
  losses cv.jsonl > cv.txt
  check "tp=2 with the vocabulary padded to 384 over NCCL: 4 steps match the unpadded host run to 1e-5" \
    close h2.txt cv.txt 1e-5
  # 2 microbatches: the gradients of the parameters used on sequence shards
  # (LayerNorms, row-parallel biases) are summed over the tensor group once
  # per step by the runtime, not in every backward (which would count the
  # first microbatch's part twice)
  mpirun --oversubscribe -np 2 ./sp_host $opts --tp 2 --microbatches 2 --dropout 0.1 --steps 4 --log hs.jsonl
  mpirun --oversubscribe -np 2 ./sp_cuda $opts --tp 2 --microbatches 2 --dropout 0.1 --steps 4 --log cs.jsonl
  losses hs.jsonl > hs.txt; losses cs.jsonl > cs.txt
  check "tp=2 with sequence parallelism (2 microbatches, dropout 0.1): 4 steps match the host binary to 1e-5" \
    close hs.txt cs.txt 1e-5
  # a column-parallel layer's input gradient is reduce-scattered during its weight gradient's
  # GEMM (srk_matmul_bias_bwd_rs; the all-gather's backward, the next step, waits and adds);
  # SHARDC_CUDA_TP_OVERLAP=0 leaves the reduce-scatter to that step: the same losses
  check "tp=2 with sequence parallelism: the 8 column-parallel matmuls' backward start their input gradient's reduce-scatter" \
    bash -c "[ \$(grep -c 'srk_matmul_bias_bwd_rs(e, ' sp.cu) -eq 8 ] && [ \$(grep -c 'reduce-scattered since the matmul' sp.cu) -eq 8 ]"
  SHARDC_CUDA_TP_OVERLAP=0 mpirun --oversubscribe -np 2 -x SHARDC_CUDA_TP_OVERLAP ./sp_cuda $opts --tp 2 --microbatches 2 \
    --dropout 0.1 --steps 4 --log cso.jsonl
  losses cso.jsonl > cso.txt
  check "tp=2 with sequence parallelism and SHARDC_CUDA_TP_OVERLAP=0 (reduce-scatter after the weight gradient): the same losses exactly" \
    cmp -s cs.txt cso.txt
  # a stage boundary carries each tensor rank's part of the sequence
  mpirun --oversubscribe --bind-to none -np 4 ./sp3_host $opts --tp 2 --pp 2 --microbatches 2 --steps 3 --log hs3.jsonl
  mpirun --oversubscribe --bind-to none -np 4 ./sp3_cuda $opts --tp 2 --pp 2 --microbatches 2 --steps 3 --log cs3.jsonl
  losses hs3.jsonl > hs3.txt; losses cs3.jsonl > cs3.txt
  check "tp=2 x pp=2 with sequence parallelism (1f1b, 2 microbatches): 3 steps match the host binary to 1e-5" \
    close hs3.txt cs3.txt 1e-5
  mpirun --oversubscribe -np 2 ./pp_host $opts --pp 2 --microbatches 2 --steps 4 --log hp.jsonl
  for sch in 1f1b zb-h1; do
    # zb-h1's memory plan keeps what its weight-gradient passes read: built for it (pp_cuda_$sch)
    mpirun --oversubscribe -np 2 ./pp_cuda_$sch $opts --pp 2 --microbatches 2 --schedule $sch --steps 4 --log cp-$sch.jsonl
    losses hp.jsonl > hp.txt; losses cp-$sch.jsonl > cp.txt
    check "pp=2 ($sch) over NCCL: 4 steps match the host binary's pp=2 to 1e-5" close hp.txt cp.txt 1e-5
  done
fi
# LLaMA-style blocks: rotary embeddings on q and k (srk_rope_*), RMSNorm, SwiGLU
./ll_host $opts --steps 5 --log hl.jsonl
./ll_cuda $opts --steps 5 --log cl.jsonl
./llb_cuda $opts --steps 5 --log cbl.jsonl
losses hl.jsonl > hl.txt; losses cl.jsonl > cl.txt; losses cbl.jsonl > cbl.txt
check "LLaMA-style model with RoPE, fp32: 5 steps match the host binary to 1e-5" close hl.txt cl.txt 1e-5
check "LLaMA-style model with RoPE, bf16: 5 steps within 2e-2 of the host binary" close hl.txt cbl.txt 2e-2
if command -v mpirun >/dev/null; then
  mpirun --oversubscribe -np 2 ./ll2_cuda $opts --tp 2 --steps 5 --log cl2.jsonl
  losses cl2.jsonl > cl2.txt
  check "LLaMA-style model with RoPE at tp=2 over NCCL (a rank rotates its heads): the host's one-rank losses" \
    close hl.txt cl2.txt 1e-5
fi
# Llama 3.2-style: the llama3 rope scaling (sr_rope_inv_freq on the device),
# reaching these short sequences, and the output head tied to the embedding
small="--set hidden_size=64 --set intermediate_size=128 --set num_hidden_layers=2"
emu_vs_host() { # name example what [shardc flags...]: 5 fp32 steps of the emulated CUDA build vs the host's
  local n=$1 ex=$2 what=$3; shift 3
  "$gen" "$src/examples/$ex.model" $small "$@" --cuda "$n.cu" --build "${n}_cuda" --emulate &&
    "$shardc" build "$src/examples/$ex.model" $small "$@" -o "${n}_host"
  "./${n}_host" $opts --steps 5 --log "h$n.jsonl"
  "./${n}_cuda" $opts --steps 5 --log "c$n.jsonl"
  losses "h$n.jsonl" > "h$n.txt"; losses "c$n.jsonl" > "c$n.txt"
  check "$what, fp32: 5 steps match the host binary to 1e-5" close "h$n.txt" "c$n.txt" 1e-5
}
emu_vs_host l3 llama3 "Llama 3.2-style model (llama3 rope scaling, tied head)" \
  --set rope_scaling.original_max_position_embeddings=16
# Qwen2-style: biases on the [out, in] q, k and v projections (matmul_t + bias)
emu_vs_host q2 qwen2 "Qwen2-style model (q/k/v biases, tied head)"
./rc_cuda $opts --steps 6 --dropout 0.1 --recompute block --log rc.jsonl
losses rc.jsonl > rc.txt
check "recomputation (--recompute block, dropout 0.1): 6 steps match the host binary to 1e-5" close h.txt rc.txt 1e-5
# bf16 fuses each MLP's d matmul and d gelu (cuBLASLt's DGELU epilogue; srk_matmul_gelu_bwd):
# with recomputation the GELU's input it reads is the recomputed one; at tp=2 h is a column shard
check "bf16 builds fuse d matmul with d gelu (4 layers)" test "$(grep -c 'srk_matmul_gelu_bwd(' rcb.cu)" = 4
./rcb_cuda $opts --steps 6 --dropout 0.1 --recompute block --log rcb.jsonl
losses rcb.jsonl > rcb.txt
check "bf16 with recomputation (--recompute block, dropout 0.1): 6 steps within 2e-2 of the host binary" \
  close h.txt rcb.txt 2e-2
# sampling from a bf16 program: its logits are bf16 (sr_exec.logits_bf16), widened on the host;
# greedy decoding from a host checkpoint of 30 steps, at tp=1 and at tp=2 (each rank's columns
# widened, then gathered): nine in ten sampled bytes as the host's (bf16 may break a near tie)
./tg_host $opts --steps 30 --save sck --save-every 30 > /dev/null
smp="--steps 0 --load sck/step-00000030 --sample 40 --temperature 0 --quiet"
./tg_host $opts $smp > s_host.txt 2> /dev/null
./tgb_cuda $opts $smp > s_bf16.txt 2> s_bf16.err
same_text() { # same_text A B: as long, and at least 90% the same bytes
  $py - "$1" "$2" <<'PY'
import sys
a, b = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
same = sum(x == y for x, y in zip(a, b))
print("   %d of %d bytes the same" % (same, len(a)))
sys.exit(0 if len(a) == len(b) and len(a) > 30 and same >= 0.9 * len(a) else 1)
PY
}
check "bf16 sampling (greedy, 40 tokens): as the host binary's" same_text s_host.txt s_bf16.txt
# --eval-mc reads the same logits (fetched in rows of up to 32 positions, bf16 ones widened):
# each completion's summed loss from the fp32 program as the host's, from the bf16 one within 2e-2
printf '%s\n' '{"ctx": "The cat sat on the", "endings": ["mat and then it slept for a long while", "dog"], "label": 0}' \
  '{"ctx": "A", "endings": ["b", "rather long ending, its logits fetched in two rows of positions", "c"], "label": 1}' \
  > mc.jsonl
mcs="--steps 0 --load sck/step-00000030 --eval-mc mc.jsonl --seq 64 --quiet"
./tg_host $opts $mcs --eval-mc-out mc_host.jsonl
./tg_cuda $opts $mcs --eval-mc-out mc_fp32.jsonl
./tgb_cuda $opts $mcs --eval-mc-out mc_bf16.jsonl
mc_close() { # mc_close A B TOL: the same examples, each completion's loss within TOL (relative)
  $py - "$1" "$2" "$3" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(f)] for f in sys.argv[1:3])
la = [x for r in a for x in r["losses"]]
lb = [x for r in b for x in r["losses"]]
worst = max(abs(x - y) / abs(x) for x, y in zip(la, lb)) if la and len(la) == len(lb) else float("inf")
print("   %d completions, worst relative difference %.2e" % (len(la), worst))
sys.exit(0 if len(la) == 5 and worst <= float(sys.argv[3]) else 1)
PY
}
check "--eval-mc, fp32: each completion's loss as the host binary's (1e-5)" mc_close mc_host.jsonl mc_fp32.jsonl 1e-5
check "--eval-mc, bf16 logits: each completion's loss within 2e-2 of the host binary's" \
  mc_close mc_host.jsonl mc_bf16.jsonl 2e-2
if command -v mpirun >/dev/null; then
  mpirun --oversubscribe -np 2 ./tg2b_cuda $opts --tp 2 --steps 4 --log c2b.jsonl --comm-stats c2b.stats
  losses c2b.jsonl > c2b.txt
  check "bf16 at tp=2 over NCCL: 4 steps within 2e-2 of the host binary's tp=2" close h2.txt c2b.txt 2e-2
  # the activations' sums move as bf16 (2 bytes an element): the tensor group's calls and
  # bytes are what shardc plan --precision bf16 says, to the byte (the cross-entropy's
  # statistics are float in both)
  "$shardc" plan "$m" --tp 2 --gpus 2 --batch 4 --seq 32 --precision bf16 --json > p2b.json
  check "bf16 at tp=2: the tensor group's collectives are shardc plan --precision bf16's ($(grep tensor c2b.stats | tr '\n' ';'))" \
    $py "$src/tests/plan/counters.py" p2b.json c2b.stats --groups tensor
  # a column-parallel layer's input-gradient all-reduce runs during its weight gradient's GEMM:
  # one call per such matmul (2 a layer: q|k|v and the MLP's first), whose all-reduce step is
  # left out; SHARDC_CUDA_TP_OVERLAP=0 runs the all-reduce after that GEMM: the same losses
  check "tp=2: the 8 column-parallel matmuls' backward overlap their input gradient's all-reduce (bf16 and fp32)" \
    bash -c "for f in tg2b.cu tg2.cu; do [ \$(grep -c 'srk_matmul_bias_bwd_ar(e, ' \$f) -eq 8 ] &&
      [ \$(grep -c 'summed over the tensor group by the matmul' \$f) -eq 8 ] || exit 1; done"
  SHARDC_CUDA_TP_OVERLAP=0 mpirun --oversubscribe -np 2 -x SHARDC_CUDA_TP_OVERLAP ./tg2b_cuda $opts --tp 2 --steps 4 \
    --log c2bo.jsonl
  losses c2bo.jsonl > c2bo.txt
  check "bf16 tp=2 with SHARDC_CUDA_TP_OVERLAP=0 (all-reduce after the weight gradient): the same losses exactly" \
    cmp -s c2b.txt c2bo.txt
  # the emulator's race check guards that overlap: with the all-reduce started before the input
  # gradient's GEMM (a copy of the kernels, mutated), that GEMM writes the buffer in flight, and
  # the program stops with the race named (on a GPU: sums that depend on timing). The error comes
  # in the backward of the only step, after its loss: the run still exits non-zero and saves no
  # checkpoint (it exited 0 and saved one as the latest before train.c and rt_checkpoint synced)
  rm -rf mut && cp -r "$src/runtime/cuda" mut
  $py - mut/srk_tp.cuh <<'PY'
import sys
p = sys.argv[1]; s = open(p).read()
a = "    srk_dgrad(da, g, gdt, b, M, K, N, fresh);\n"
b = "    sr_req *q = srk_tp_allreduce_start(e, da, M * K);\n"
assert s.count(a + b) == 1
open(p, "w").write(s.replace(a + b, b + a))
PY
  SHARDC_CUDA_INCLUDE=$PWD/mut "$gen" "$m" --bf16 --tp 2 --cuda tg2m.cu --build tg2m_cuda --emulate
  mpirun --oversubscribe -np 2 ./tg2m_cuda $opts --tp 2 --steps 1 --save mck --save-every 1 > mut.txt 2>&1; rc=$?
  check "the race check: the all-reduce started before the input gradient's GEMM stops the program, naming it (rc $rc: $(grep -m1 'stream race' mut.txt | cut -c1-120))" \
    bash -c "[ $rc -ne 0 ] && grep -q 'cuda_emu: a stream race: matmul changed byte [0-9]* of the output of ncclAllReduce' mut.txt &&
      grep -q 'shardc cuda: error: .*nn.model:[0-9]* d add+matmul+all-reduce' mut.txt"
  check "a device error in the last step: no checkpoint saved ($(ls mck 2>&1 | head -c 80))" bash -c "[ ! -e mck/latest ]"
  mpirun --oversubscribe -np 2 ./tg2b_cuda $opts --tp 2 $smp > s_bf16tp.txt 2> /dev/null
  check "bf16 sampling at tp=2 (each rank's bf16 columns gathered): as the host binary's" \
    same_text s_host.txt s_bf16tp.txt
fi

# SHARDC_CUDA_PROFILE=1: the device time of every generated call, by .model site, at exit;
# the numbers of the emulator are host times, so only the report's shape is checked
./tg_cuda $opts --steps 3 --log p0.jsonl 2> p0.err
SHARDC_CUDA_PROFILE=1 ./tg_cuda $opts --steps 3 --log p1.jsonl 2> p1.err
losses p0.jsonl > p0.txt; losses p1.jsonl > p1.txt
check "SHARDC_CUDA_PROFILE=1: the same losses" close p0.txt p1.txt 0
check "no profile without SHARDC_CUDA_PROFILE" bash -c "! grep -q 'cuda profile' p0.err"
# (at dropout 0 the dropouts' backward steps do not run: gradalias.c; a training step runs the
# loss fused with its gradient, not the plain loss of evaluation or the backward's own
# gradient for a forward not told it trains: lossfuse.c)
sites=$(grep -o 'SRK_AT("[^"]*"' tg.cu | grep -v -E ' d dropout"|[0-9] (d )?cross_entropy"' | sort -u | wc -l)
check "the profile: one row per site of tg.cu that a training step runs at dropout 0 ($sites), steps 2 and 3, 4 layers' attention per step, 100%" \
  $py - p1.err "$sites" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
head = re.search(r"shardc cuda profile \(rank 0; 2 steps, the first left out\): ([0-9.]+) ms of device time in (\d+) call sites", text)
rows = {m.group(5): (float(m.group(1)), float(m.group(2)), int(m.group(3)))
        for m in re.finditer(r"^ +([0-9.]+) +([0-9.]+) +(\d+) +([0-9.]+)  (.+)$", text, re.M)}
print("   ", head.group(0) if head else text[:300], "|", len(rows), "rows")
ok = head and int(head.group(2)) == int(sys.argv[2]) == len(rows)
ok = ok and rows.get("nn.model:80 causal_attention", (0, 0, 0))[2] == 4
ok = ok and rows.get("nn.model:80 d causal_attention", (0, 0, 0))[2] == 4
ok = ok and abs(sum(r[1] for r in rows.values()) - 100) < 0.5
ok = ok and abs(sum(r[0] for r in rows.values()) * 2 - float(head.group(1))) < 0.01 * float(head.group(1)) + 0.01
sys.exit(0 if ok else 1)
PY

EMU_DEVICES=0 ./tg_cuda $opts --steps 1 2> nogpu.txt; rc=$?
want="no CUDA device: this program was built for NVIDIA GPUs (--backend cuda); rebuild with --backend host to run on the CPU"
check "no GPU: exit 1 (got $rc)" [ $rc -eq 1 ]
check "no GPU: one line saying so ($(head -c 200 nogpu.txt))" bash -c "[ \$(wc -l < nogpu.txt) -eq 1 ] && grep -qF '$want' nogpu.txt"

SHARDC_CUDA_BGRAD=yes ./tgb_cuda $opts --steps 1 2> badbgrad.txt; rc=$?
check "SHARDC_CUDA_BGRAD=yes: exit 2, one line (got $rc: $(head -c 200 badbgrad.txt))" bash -c \
  "[ $rc -eq 2 ] && [ \$(wc -l < badbgrad.txt) -eq 1 ] && grep -q 'SHARDC_CUDA_BGRAD=yes: expected 1' badbgrad.txt"
SHARDC_CUDA_TP_OVERLAP=on ./tgb_cuda $opts --steps 1 2> badov.txt; rc=$?
check "SHARDC_CUDA_TP_OVERLAP=on: exit 2, one line (got $rc: $(head -c 200 badov.txt))" bash -c \
  "[ $rc -eq 2 ] && [ \$(wc -l < badov.txt) -eq 1 ] && grep -q 'SHARDC_CUDA_TP_OVERLAP=on: expected 1' badov.txt"
SHARDC_CUDA_ATTN=flash ./tgb_cuda $opts --steps 1 2> badattn.txt; rc=$?
check "SHARDC_CUDA_ATTN=flash: exit 2, one line naming the choices (got $rc: $(head -c 200 badattn.txt))" bash -c \
  "[ $rc -eq 2 ] && [ \$(wc -l < badattn.txt) -eq 1 ] && grep -q 'SHARDC_CUDA_ATTN=flash: expected auto (the default: the fastest path that agrees with simt), wmma, mma, cudnn or simt' badattn.txt"
SHARDC_CUDA_GEMM=fast ./tgb_cuda $opts --steps 1 2> badgemm.txt; rc=$?
check "SHARDC_CUDA_GEMM=fast: exit 2, one line naming the choices (got $rc: $(head -c 200 badgemm.txt))" bash -c \
  "[ $rc -eq 2 ] && [ \$(wc -l < badgemm.txt) -eq 1 ] && grep -q 'SHARDC_CUDA_GEMM=fast: expected heuristic (the default' badgemm.txt"
# tune: trains, and says after the first step what it did (on the emulator: nothing to tune); a
# tensor-parallel program refuses it at start-up (replicated gradients need one algorithm)
SHARDC_CUDA_GEMM=tune ./tgb_cuda ${opts% --quiet} --steps 2 > tune.out 2>&1; rc=$?  # the note is not --quiet
check "SHARDC_CUDA_GEMM=tune: trains, the note after the first step says the emulator has nothing to tune (got $rc)" \
  bash -c "[ $rc -eq 0 ] && grep -q 'GEMMs (SHARDC_CUDA_GEMM=tune): nothing to tune on the emulator' tune.out"
SHARDC_CUDA_GEMM=tune ./tg2_cuda $opts --tp 2 --steps 1 2> tunetp.txt; rc=$?
check "SHARDC_CUDA_GEMM=tune at tp=2: exit 2, one line saying why (got $rc: $(head -c 200 tunetp.txt))" bash -c \
  "[ $rc -eq 2 ] && [ \$(wc -l < tunetp.txt) -eq 1 ] && grep -q 'SHARDC_CUDA_GEMM=tune: not with tensor parallelism (this program is built for tp=2)' tunetp.txt"

# SHARDC_CUDA_ATTN=cudnn where cuDNN cannot run (the emulator's runtime never has it): the first
# attention stops the step with why, naming the .model site and the generated line, not a NaN loss
SHARDC_CUDA_ATTN=cudnn ./tgb_cuda $opts --steps 1 > nocudnn.out 2> nocudnn.txt; rc=$?
check "SHARDC_CUDA_ATTN=cudnn without cuDNN: exit 1, the error says why and where (got $rc: $(tail -1 nocudnn.txt | head -c 300))" \
  bash -c "[ $rc -eq 1 ] && grep -q 'error: CUDA: SHARDC_CUDA_ATTN=cudnn: this runtime was built without cuDNN.* (nn.model:80 causal_attention, at [a-z_]*\.cu:[0-9]*)' nocudnn.txt && ! grep -q 'loss became' nocudnn.txt nocudnn.out"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
