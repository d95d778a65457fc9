#!/usr/bin/env bash
# Training speed on this machine's CPU: shardc's host backend against
# PyTorch running the same model (bench/torch_train.py) with the same thread
# count. Usage: bench/bench_train.sh [BUILD_DIR]; prints one line per model.
#
# PyTorch runs twice: "ref" is tests/reference/gpt2_ref.py's model as written
# (LayerNorm, GELU, attention in elementary ops), "fused" the same math with
# PyTorch's fused CPU kernels (bench/torch_train.py --impl fused), the harder
# baseline; the ratio is shardc / the faster of the two.
#
# Each figure is tokens/s from the median step and, in brackets, from the
# fastest step (the least disturbed one when other jobs share the machine).
# The first 2 steps are warm-up and not counted, on either side.
#
# Environment: THREADS (default nproc); WORK=DIR keeps the programs, token
# files and logs in DIR (e.g. for perf) and appends to its logs;
# MODELS="tinygpt gpt12x768" (default both); STEPS_TINY / STEPS_BIG (default
# 20 / 8); ROUNDS=R repeats shardc, torch ref and torch fused R times,
# interleaved, so that a burst of outside load hits all three alike
# (default 1). Every step of every round counts in the statistics.
# TORCH_ENV (default "OMP_WAIT_POLICY=PASSIVE") is set for the PyTorch runs:
# Debian's torch runs its OpenMP pool next to OpenBLAS's own pthreads pool,
# and with OpenMP's default active waiting the two pools fight over the
# cores (measured on 2 cores: tinygpt 2-3x slower and erratic). Passive
# waiting is PyTorch's best setting here; TORCH_ENV= (empty) gives the
# default behaviour. shardc runs with the OpenMP defaults: it keeps OpenBLAS
# on one thread per call and owns the parallelism through OpenMP alone.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); src=$(cd "$here/.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
threads=${THREADS:-$(nproc)}
rounds=${ROUNDS:-1}
torch_env=${TORCH_ENV-OMP_WAIT_POLICY=PASSIVE}
if [ -n "${WORK:-}" ]; then mkdir -p "$WORK"; w=$(cd "$WORK" && pwd)
else w=$(mktemp -d); trap 'rm -rf "$w"' EXIT; fi
cd "$w"
py=/usr/bin/python3
shardc_steps() { # log -> step ms of the timed steps, one a line
  $py -c "
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if '\"loss\"' in l][2:]
print('\n'.join(str(x['ms']) for x in r))" "$1"; }
torch_steps() { # name B T N impl -> step ms of the timed steps, one a line
  env $torch_env $py "$here/torch_train.py" --config "$1.json" --batch "$2" --seq "$3" --steps "$4" --threads "$threads" \
      --impl "$5" | tee -a "$1.torch.jsonl" | $py -c "
import json, sys
print('\n'.join(str(x) for x in json.load(sys.stdin)['steps_ms'][2:]))"; }
stats() { # file of step ms, tokens per step -> "median tok/s (best tok/s)"
  $py -c "
import statistics, sys
ms = [float(l) for l in open(sys.argv[1]) if l.strip()]
tok = int(sys.argv[2])
print(f'{tok / statistics.median(ms) * 1e3:.0f} ({tok / min(ms) * 1e3:.0f})')" "$1" "$2"; }
bench() { # name config-json batch seq steps
  local name=$1 cfg=$2 B=$3 T=$4 N=$5
  echo "$cfg" > "$name.json"
  "$build/shardc" build "$src/examples/gpt2.model" --config "$name.json" -o "$name"
  [ -f "$name.tok" ] || $py "$src/tests/reference/gpt2_ref.py" tokens --out "$name.tok" --n $((B * T * (N + 1) + 1)) \
      --vocab "$($py -c "import json; print(json.load(open('$name.json'))['vocab_size'])")" --seed 1
  : > "$name.shardc.ms"; : > "$name.ref.ms"; : > "$name.fused.ms"
  for ((r = 0; r < rounds; r++)); do
    OMP_NUM_THREADS=$threads "./$name" --data "$name.tok" --batch "$B" --seq "$T" --steps "$N" --lr 1e-4 \
        --grad-clip 1.0 --threads "$threads" --log "$name.jsonl" --quiet
    shardc_steps "$name.jsonl" >> "$name.shardc.ms"
    torch_steps "$name" "$B" "$T" "$N" ref >> "$name.ref.ms"
    torch_steps "$name" "$B" "$T" "$N" fused >> "$name.fused.ms"
  done
  local ours ref fused
  ours=$(stats "$name.shardc.ms" $((B * T))); ref=$(stats "$name.ref.ms" $((B * T)))
  fused=$(stats "$name.fused.ms" $((B * T)))
  echo "$name: B=$B T=$T threads=$threads rounds=$rounds  tok/s median (best):" \
       " shardc $ours  PyTorch ref $ref  PyTorch fused $fused  ratio $($py -c "
a, b, c = (float(s.split()[0]) for s in '''$ours|$ref|$fused'''.split('|'))
print(f'{a / max(b, c):.2f}')")"
}
for m in ${MODELS:-tinygpt gpt12x768}; do
  case $m in
  tinygpt) bench tinygpt '{"vocab_size": 256, "n_positions": 128, "n_embd": 128, "n_layer": 4, "n_head": 4}' \
             16 128 "${STEPS_TINY:-20}" ;;
  gpt12x768) bench gpt12x768 '{"vocab_size": 50257, "n_positions": 256, "n_embd": 768, "n_layer": 12, "n_head": 12}' \
             4 256 "${STEPS_BIG:-8}" ;;
  *) echo "unknown model $m" >&2; exit 2 ;;
  esac
done
