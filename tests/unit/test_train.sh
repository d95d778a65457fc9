#!/usr/bin/env bash
# test_train.sh: end-to-end checks of the training driver (runtime/train.c)
# through the hand-written bigram program tests/unit/fake_program.c.
#
# usage: tests/unit/test_train.sh PATH/TO/fake_program_binary
# Builds nothing; prints one line per check and ends with "N passed, M failed".
set -u

BIN=${1:?usage: test_train.sh FAKE_PROGRAM_BINARY}
case $BIN in /*) ;; *) BIN=$PWD/$BIN ;; esac
[ -x "$BIN" ] || { echo "test_train.sh: $BIN is not executable" >&2; exit 2; }

W=$(mktemp -d "${TMPDIR:-/tmp}/test_train.XXXXXX")
trap 'rm -rf "$W"' EXIT
cd "$W" || exit 2

pass=0
fail=0
ok() { echo "ok   - $1"; pass=$((pass + 1)); }
no() { echo "FAIL - $1${2:+: $2}"; fail=$((fail + 1)); }
check() { # check NAME CONDITION-COMMAND...
    local name=$1
    shift
    if "$@"; then ok "$name"; else no "$name"; fi
}

# losses FILE: the "loss" values of the step lines, one per line, as printed
losses() { grep -o '"loss":[^,}]*' "$1" | cut -d: -f2; }
val_losses() { grep -o '"val_loss":[^,}]*' "$1" | cut -d: -f2; }
nlines() { wc -l <"$1" | tr -d ' '; }

# Some English text, and a different validation text.
for i in $(seq 1 300); do
    echo "the quick brown fox jumps over the lazy dog; a stitch in time saves nine ($i)."
done >train.txt
for i in $(seq 1 60); do
    echo "every good boy deserves fudge, and the lazy dog sleeps in the sun ($i)."
done >val.txt

# ---------------------------------------------------------------- flags
"$BIN" --bogus >out 2>err
rc=$?
check "unknown flag exits 2" [ $rc -eq 2 ]
check "unknown flag: one error line plus 'try --help'" \
    sh -c "[ \$(wc -l <err) -eq 2 ] && grep -q 'error: unknown flag' err && grep -q -- '--help' err"

"$BIN" --data train.txt --steps abc >out 2>err
check "bad integer value exits 2" [ $? -eq 2 ]
"$BIN" --data train.txt --batch 8 --microbatches 3 >out 2>err
check "batch not divisible by microbatches exits 2" [ $? -eq 2 ]
"$BIN" --data train.txt --lr-schedule linear --lr 0.001 --min-lr 0.002 --steps 2 >out 2>err
check "--min-lr above --lr with a decaying schedule exits 2, saying so" sh -c \
    "[ $? -eq 2 ] && grep -q -- 'error: --min-lr 0.002 is above --lr 0.001, so the linear schedule would raise' err"
"$BIN" --data train.txt --lr-schedule constant --lr 0.001 --min-lr 0.002 --steps 2 --quiet >out 2>err
check "--min-lr above --lr with --lr-schedule constant (min-lr unused) runs" [ $? -eq 0 ]
"$BIN" --lr-schedule linear --lr 0.001 --min-lr 0.002 --steps 0 --quiet >out 2>err
check "--min-lr above --lr with --steps 0 (no step, no schedule) runs" [ $? -eq 0 ]
printf '%s\n' '{"ctx": "ab", "endings": ["ba", "aa"], "label": 0}' '{"ctx": "b", "endings": ["a", "b", "ab"], "label": 2}' \
    > mc.jsonl
# flags the run would ignore: a warning each, and the run goes on; with what they need, or
# values that ask for nothing, none
"$BIN" --data train.txt --steps 1 --quiet --save-every 5 --eval-every 2 --eval-batches 3 --prompt ab \
    --temperature 0.5 --top-k 3 --top-p 0.9 --sample-every 2 --decay-steps 2 --min-lr 0.001 --lr-schedule constant \
    --keep-last 2 --eval-mc-examples 3 --eval-mc-out mco.jsonl >out 2>err
rc=$?
check "thirteen flags that do nothing here: exit 0, a warning naming each and what it needs" sh -c \
    "[ $rc -eq 0 ] && [ \$(grep -c ': warning: --.* has no effect' err) -eq 13 ] &&
     grep -q 'warning: --eval-every has no effect without --val-data FILE or --eval-mc FILE' err &&
     grep -q 'warning: --eval-mc-examples has no effect without --eval-mc FILE' err &&
     grep -q 'warning: --eval-mc-out has no effect without --eval-mc FILE' err &&
     grep -q 'warning: --keep-last has no effect without --save DIR' err &&
     grep -q 'warning: --save-every has no effect without --save DIR' err &&
     grep -q 'warning: --eval-batches has no effect without --val-data FILE' err &&
     grep -q 'warning: --top-k has no effect without --sample N' err &&
     grep -q 'warning: --top-p has no effect without --sample N' err &&
     grep -q 'warning: --sample-every has no effect without --sample N' err &&
     grep -q 'warning: --decay-steps has no effect unless --lr-schedule is wsd' err &&
     grep -q 'warning: --min-lr has no effect with --lr-schedule constant' err"
"$BIN" --data train.txt --steps 1 --quiet --save-every 5 --save ckw0 --val-data val.txt --eval-every 2 \
    --eval-batches 3 --sample 2 --sample-every 2 --prompt ab --temperature 0.5 --top-k 3 --top-p 0.9 --lr-schedule wsd \
    --decay-steps 2 --min-lr 0.001 --keep-last 2 --eval-mc mc.jsonl --eval-mc-examples 1 --eval-mc-out mco.jsonl \
    >out 2>err
rc=$?
"$BIN" --data train.txt --steps 1 --quiet --save-every 0 --eval-every 0 --decay-steps 0 --min-lr 0 --keep-last 0 >>out 2>>err
rc2=$?
"$BIN" --data train.txt --steps 2 --quiet --eval-every 1 --eval-mc mc.jsonl >>out 2>>err
check "the same flags with what they need, or asking for nothing: no warning" \
    sh -c "[ $rc -eq 0 ] && [ $rc2 -eq 0 ] && [ $? -eq 0 ] && ! grep -q warning err"
"$BIN" --data=train.txt --steps=2 --quiet >out 2>err
check "--name=value form accepted" [ $? -eq 0 ]
"$BIN" --help >out 2>err
check "--help exits 0 and lists flags" sh -c "[ $? -eq 0 ] && grep -q -- '--microbatches' out"
"$BIN" --version >out 2>err
check "--version exits 0" [ $? -eq 0 ]

# ---------------------------------------------------------------- missing data
"$BIN" --data no-such-file.bin --steps 5 >out 2>err
rc=$?
check "missing data file exits 1" [ $rc -eq 1 ]
check "missing data file: one line naming it" \
    sh -c "[ \$(wc -l <err) -eq 1 ] && grep -q 'no-such-file.bin' err"

head -c 100 train.txt >tiny.txt
"$BIN" --data tiny.txt --batch 8 --seq 32 --steps 5 >out 2>err
check "data shorter than one batch exits 1 naming it" \
    sh -c "[ $? -eq 1 ] && [ \$(wc -l <err) -eq 1 ] && grep -q 'tiny.txt has 100 tokens' err"

# ---------------------------------------------------------------- learning
"$BIN" --data train.txt --steps 50 --lr 0.02 --log learn.log --quiet >out 2>err
rc=$?
first=$(losses learn.log | head -1)
last=$(losses learn.log | tail -1)
n=$(losses learn.log | wc -l)
check "50 steps run (exit 0, 50 log lines)" [ $rc -eq 0 -a "$n" -eq 50 ]
check "loss falls over 50 steps ($first -> $last)" \
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(a > 5.0 && b < a - 1.0) }'
check "--quiet prints nothing" sh -c "[ ! -s out ] && [ ! -s err ]"
check "log lines carry step, loss, lr, grad_norm, tokens_per_s, ms" \
    sh -c "[ \$(grep -c '^{\"step\":[0-9]*,\"loss\":[-0-9.e]*,\"lr\":[-0-9.e]*,\"grad_norm\":[-0-9.e]*,\"tokens_per_s\":[-0-9.e+]*,\"ms\":[-0-9.e+]*}\$' learn.log) -eq 50 ]"

# ---------------------------------------------------------------- resume, bit-exact
common="--data train.txt --val-data val.txt --batch 8 --seq 16 --microbatches 2 --lr 0.02
        --warmup 3 --weight-decay 0.1 --grad-clip 0.2 --dropout 0.1 --seed 7 --quiet"
# shellcheck disable=SC2086
"$BIN" $common --steps 20 --log full.log >/dev/null 2>&1
# shellcheck disable=SC2086
"$BIN" $common --steps 10 --save ck --log part1.log >/dev/null 2>&1
check "checkpoint written with latest -> step-00000010" \
    sh -c "[ \"\$(cat ck/latest)\" = step-00000010 ] && [ -f ck/step-00000010/model.safetensors ] &&
           [ -f ck/step-00000010/optimizer.safetensors ] && [ -f ck/step-00000010/state.json ] &&
           [ -f ck/step-00000010/config.json ]"
check "state.json records the step and the model" \
    sh -c "grep -q '\"step\": 10' ck/step-00000010/state.json && grep -q '\"model\": \"Bigram\"' ck/step-00000010/state.json"
# shellcheck disable=SC2086
"$BIN" $common --steps 20 --load ck --log part2.log >/dev/null 2>err
check "resume exits 0" [ $? -eq 0 ]
losses full.log | head -10 >full_a
losses full.log | tail -10 >full_b
losses part1.log >p1
losses part2.log >p2
check "first 10 steps identical" sh -c "[ \$(wc -l <p1) -eq 10 ] && cmp -s full_a p1"
check "20 steps == 10 + save + load + 10, bit-exact" sh -c "[ \$(wc -l <p2) -eq 10 ] && cmp -s full_b p2"
check "resumed run logs steps 10..19" sh -c "head -1 part2.log | grep -q '\"step\":10,'"
va=$(val_losses full.log)
vb=$(val_losses part2.log)
check "final validation losses equal ($va)" [ -n "$va" -a "$va" = "$vb" ]

# cosine schedule: resume from an intermediate step directory of a 20-step run
cos="$common --lr-schedule cosine --min-lr 0.002"
# shellcheck disable=SC2086
"$BIN" $cos --steps 20 --log cfull.log >/dev/null 2>&1
# shellcheck disable=SC2086
"$BIN" $cos --steps 20 --save ckc --save-every 10 --log cpart1.log >/dev/null 2>&1
check "--save-every 10 of 20 steps writes step 10 and 20" \
    sh -c "[ -d ckc/step-00000010 ] && [ -d ckc/step-00000020 ] && [ \"\$(cat ckc/latest)\" = step-00000020 ]"
# shellcheck disable=SC2086
"$BIN" $cos --steps 20 --load ckc/step-00000010 --log cpart2.log >/dev/null 2>&1
losses cfull.log | tail -10 >cf
losses cpart2.log >cp
check "cosine: resume from a step directory is bit-exact" sh -c "[ \$(wc -l <cp) -eq 10 ] && cmp -s cf cp"
# warmup 3 then cosine from 0.02 to 0.002 over the remaining 17 steps
check "warmup + cosine learning rates follow the formula" awk '
    /"lr"/ { match($0, /"step":[0-9]+/); k = substr($0, RSTART + 7, RLENGTH - 7) + 0
      match($0, /"lr":[-0-9.e]+/); lr = substr($0, RSTART + 5, RLENGTH - 5) + 0
      if (k < 3) want = 0.02 * (k + 1) / 3
      else want = 0.002 + 0.5 * (0.02 - 0.002) * (1 + cos(3.141592653589793 * (k - 3) / 17))
      if (lr - want > 1e-8 || want - lr > 1e-8) bad++; n++ }
    END { exit !(n == 20 && bad == 0) }' cfull.log
# linear: warmup 3 then straight down to 0.002 over 17 steps; wsd with
# --decay-steps 5: 0.02 until step 15, then straight down over the last 5;
# wsd's default decay is the last fifth (4 of 20 steps); wsd resumes bit-exact
# shellcheck disable=SC2086
"$BIN" $common --lr-schedule linear --min-lr 0.002 --steps 20 --log lin.log >/dev/null 2>&1
check "warmup + linear learning rates follow the formula" awk '
    /"lr"/ { match($0, /"step":[0-9]+/); k = substr($0, RSTART + 7, RLENGTH - 7) + 0
      match($0, /"lr":[-0-9.e]+/); lr = substr($0, RSTART + 5, RLENGTH - 5) + 0
      want = k < 3 ? 0.02 * (k + 1) / 3 : 0.002 + (0.02 - 0.002) * (1 - (k - 3) / 17)
      if (lr - want > 1e-8 || want - lr > 1e-8) bad++; n++ }
    END { exit !(n == 20 && bad == 0) }' lin.log
# shellcheck disable=SC2086
"$BIN" $common --lr-schedule wsd --decay-steps 5 --min-lr 0.002 --steps 20 --log wsd.log >/dev/null 2>&1
check "wsd: warmup, stable, then linear over --decay-steps 5" awk '
    /"lr"/ { match($0, /"step":[0-9]+/); k = substr($0, RSTART + 7, RLENGTH - 7) + 0
      match($0, /"lr":[-0-9.e]+/); lr = substr($0, RSTART + 5, RLENGTH - 5) + 0
      want = k < 3 ? 0.02 * (k + 1) / 3 : (k < 15 ? 0.02 : 0.002 + (0.02 - 0.002) * (1 - (k - 15) / 5))
      if (lr - want > 1e-8 || want - lr > 1e-8) bad++; n++ }
    END { exit !(n == 20 && bad == 0) }' wsd.log
# shellcheck disable=SC2086
"$BIN" $common --lr-schedule wsd --min-lr 0.002 --steps 20 --save ckw --save-every 10 --log wsd_d.log >/dev/null 2>&1
check "wsd: by default the last fifth decays (from step 16)" awk '
    /"lr"/ { match($0, /"step":[0-9]+/); k = substr($0, RSTART + 7, RLENGTH - 7) + 0
      match($0, /"lr":[-0-9.e]+/); lr = substr($0, RSTART + 5, RLENGTH - 5) + 0
      want = k < 3 ? 0.02 * (k + 1) / 3 : (k < 16 ? 0.02 : 0.002 + (0.02 - 0.002) * (1 - (k - 16) / 4))
      if (lr - want > 1e-8 || want - lr > 1e-8) bad++; n++ }
    END { exit !(n == 20 && bad == 0) }' wsd_d.log
# shellcheck disable=SC2086
"$BIN" $common --lr-schedule wsd --min-lr 0.002 --steps 20 --load ckw/step-00000010 --log wsd_r.log >/dev/null 2>&1
losses wsd_d.log | tail -10 >wf
losses wsd_r.log >wr
check "wsd: resume from step 10 is bit-exact" sh -c "[ \$(wc -l <wr) -eq 10 ] && cmp -s wf wr"
# shellcheck disable=SC2086
"$BIN" $common --lr-schedule exponential --steps 2 >/dev/null 2>err; rc=$?
check "an unknown schedule is a usage error (exit $rc): $(head -1 err)" \
    sh -c "[ $rc -eq 2 ] && grep -q 'constant, cosine, linear or wsd' err"
clipped=$(grep -o '"grad_norm":[^,]*' cfull.log | cut -d: -f2 | awk '$1 > 0.2' | wc -l)
check "gradient clipping is exercised (norm > 0.2 on $clipped steps)" [ "$clipped" -gt 0 ]

# the thread count does not change the numbers
# shellcheck disable=SC2086
"$BIN" $common --steps 5 --threads 1 --log t1.log >/dev/null 2>&1
# shellcheck disable=SC2086
"$BIN" $common --steps 5 --threads 2 --log t2.log >/dev/null 2>&1
l1=$(losses t1.log)
l2=$(losses t2.log)
check "--threads 1 and 2 give identical losses" [ -n "$l1" -a "$l1" = "$l2" ]

# ---------------------------------------------------------------- --init
want=$(val_losses part1.log | tail -1)
"$BIN" --init ck/step-00000010/model.safetensors --val-data val.txt --batch 8 --seq 16 \
    --microbatches 2 --steps 0 --log i1.log --quiet >/dev/null 2>err
check "--init FILE reproduces the saved model's val loss ($want)" \
    sh -c "[ -n '$want' ] && [ \"\$(grep -o '\"val_loss\":[^,}]*' i1.log | cut -d: -f2)\" = '$want' ]"
"$BIN" --init ck --val-data val.txt --batch 8 --seq 16 --microbatches 2 --steps 0 \
    --log i2.log --quiet >/dev/null 2>err
check "--init DIR (checkpoint root) works too" \
    sh -c "[ \"\$(grep -o '\"val_loss\":[^,}]*' i2.log | cut -d: -f2)\" = '$want' ]"
FAKE_PREFIX=transformer. "$BIN" --init ck/step-00000010/model.safetensors --val-data val.txt \
    --batch 8 --seq 16 --microbatches 2 --steps 0 --log i3.log --quiet >/dev/null 2>err
check "--init: program names with 'transformer.', file without" \
    sh -c "[ \"\$(grep -o '\"val_loss\":[^,}]*' i3.log | cut -d: -f2)\" = '$want' ]"
# shellcheck disable=SC2086
FAKE_PREFIX=transformer. "$BIN" $common --steps 3 --save ckp --log pp.log >/dev/null 2>&1
wantp=$(val_losses pp.log | tail -1)
"$BIN" --init ckp --val-data val.txt --batch 8 --seq 16 --microbatches 2 --steps 0 \
    --log i4.log --quiet >/dev/null 2>err
check "--init: file names with 'transformer.', program without" \
    sh -c "[ -n '$wantp' ] && [ \"\$(grep -o '\"val_loss\":[^,}]*' i4.log | cut -d: -f2)\" = '$wantp' ]"
FAKE_PREFIX=other. "$BIN" --init ck --steps 0 >/dev/null 2>err
check "--init with missing tensors exits 1 naming the tensor" \
    sh -c "[ $? -eq 1 ] && [ \$(wc -l <err) -eq 1 ] && grep -q 'other.wte.weight' err"
echo "not a safetensors file at all" >junk.safetensors
"$BIN" --init junk.safetensors --steps 0 >/dev/null 2>err
check "--init from a corrupt file exits 1 naming it" \
    sh -c "[ $? -eq 1 ] && [ \$(wc -l <err) -eq 1 ] && grep -q 'junk.safetensors' err"
"$BIN" --load nothing-here --steps 0 >/dev/null 2>err
check "--load of a missing directory exits 1 naming it" \
    sh -c "[ $? -eq 1 ] && [ \$(wc -l <err) -eq 1 ] && grep -q 'nothing-here' err"
# four bytes of the optimizer state's data changed on disk: the header still parses, the checksum
# written with the data (safetensors' __metadata__ data_checksum) no longer matches
rm -rf ckbad && cp -r ck ckbad
opt=ckbad/$(cat ckbad/latest)/optimizer.safetensors
printf '\001\002\003\004' | dd of="$opt" bs=1 seek=$(($(wc -c <"$opt") - 4)) conv=notrunc 2>/dev/null
# shellcheck disable=SC2086
"$BIN" $common --steps 20 --load ckbad >/dev/null 2>err
check "--load of a checkpoint whose data changed exits 1 naming the file and the checksum" \
    sh -c "[ $? -eq 1 ] && [ \$(wc -l <err) -eq 1 ] && grep -q 'optimizer.safetensors: corrupt' err && grep -q 'do not match the checksum' err"

# ---------------------------------------------------------------- failed save
touch ck/step-00000020 # a file where the new step directory must go
# shellcheck disable=SC2086
"$BIN" $common --steps 20 --load ck --save ck >/dev/null 2>err
rc=$?
check "a failing save exits 1 with one line" sh -c "[ $rc -eq 1 ] && [ \$(wc -l <err) -eq 1 ] && grep -q 'step-00000020' err"
check "a failing save leaves latest untouched" sh -c "[ \"\$(cat ck/latest)\" = step-00000010 ]"
check "a failing save leaves no temporary directory" sh -c "! ls -a ck | grep -q '^\\.tmp-'"
rm -f ck/step-00000020
# shellcheck disable=SC2086
"$BIN" $common --steps 20 --load ck --save ck >/dev/null 2>err
check "the next save commits and moves latest" \
    sh -c "[ $? -eq 0 ] && [ \"\$(cat ck/latest)\" = step-00000020 ] && [ -d ck/step-00000010 ]"

# ---------------------------------------------------------------- stopping early
# A constant rate, so that --steps does not change the schedule: a run stopped
# early and resumed can be set against one that ran straight through.
stop="$common --lr-schedule constant --eval-every 0"
# running N FILE: wait (up to 30 s) until FILE logs N steps
running() { for _ in $(seq 1 600); do [ "$(losses "$2" 2>/dev/null | wc -l)" -ge "$1" ] && return 0; sleep 0.05; done; return 1; }
# shellcheck disable=SC2086
"$BIN" $stop --steps 100000 --save cks --log stop1.log >/dev/null 2>stoperr &
pid=$!
running 5 stop1.log
kill -TERM $pid
wait $pid
rc=$?
n=$(losses stop1.log | wc -l)
check "SIGTERM with --save: the run ends after its step with exit 3 (rc $rc, after $n steps)" [ $rc -eq 3 -a "$n" -ge 5 ]
check "it says so in one line, naming the step, the checkpoint and --load" \
    grep -qx "$BIN: stopped by SIGTERM after step $n of 100000: checkpoint cks/step-$(printf %08d "$n"); resume with --load cks" stoperr
check "the checkpoint of step $n is the latest" sh -c "[ \"\$(cat cks/latest)\" = step-$(printf %08d "$n") ]"
check "no evaluation at the stop (--eval-every 0: only at the end, which the resumed run reaches)" sh -c "! grep -q val_loss stop1.log"
# shellcheck disable=SC2086
"$BIN" $stop --steps $((n + 4)) --load cks --log stop2.log >/dev/null 2>&1
# shellcheck disable=SC2086
"$BIN" $stop --steps $((n + 4)) --log stopfull.log >/dev/null 2>&1
losses stop1.log >sa
losses stop2.log >sb
losses stopfull.log >sf
check "stopped at $n + resumed for 4 == $((n + 4)) steps straight, bit-exact" \
    sh -c "[ \$(wc -l <sb) -eq 4 ] && cat sa sb | cmp -s - sf"
va=$(val_losses stopfull.log)
check "... and the same final validation loss ($va)" [ -n "$va" -a "$va" = "$(val_losses stop2.log)" ]
# two signals before the step ends (held back by SIGSTOP): the second ends the run at once
# shellcheck disable=SC2086
"$BIN" $stop --steps 100000 --save cks2 --log stop3.log >/dev/null 2>&1 &
pid=$!
running 2 stop3.log
kill -STOP $pid
kill -TERM $pid
kill -USR1 $pid
kill -CONT $pid
wait $pid
rc=$?
check "a second signal ends the run at once, by that signal (rc $rc)" [ $rc -eq 138 -o $rc -eq 143 ]
check "... with no checkpoint begun" sh -c "[ ! -e cks2/latest ] && ! ls -a cks2 2>/dev/null | grep -q '^\.tmp-'"
# Ctrl-C: SIGINT stops the same way (job control on, so that the background
# run does not start with SIGINT ignored, as a script's background jobs do)
set -m
# shellcheck disable=SC2086
"$BIN" $stop --steps 100000 --save cksi --log stop6.log >/dev/null 2>stoperr6 &
pid=$!
set +m
running 3 stop6.log
kill -INT $pid
wait $pid
rc=$?
n=$(losses stop6.log | wc -l)
check "SIGINT (Ctrl-C) with --save: exit 3 after the step under way, its checkpoint the latest (rc $rc, $n steps)" \
    sh -c "[ $rc -eq 3 ] && [ \"\$(cat cksi/latest)\" = step-$(printf %08d "$n") ] &&
           grep -qx '$BIN: stopped by SIGINT after step $n of 100000: checkpoint cksi/step-$(printf %08d "$n"); resume with --load cksi' stoperr6"
# a SIGINT ignored from the start (a script's background job, nohup) stays ignored
# shellcheck disable=SC2086
"$BIN" $stop --steps 100000 --save cksj --log stop7.log >/dev/null 2>stoperr7 &
pid=$!
running 3 stop7.log
kill -INT $pid
sleep 0.5
kill -0 $pid 2>/dev/null
alive=$?
kill -TERM $pid
wait $pid
rc=$?
check "an ignored SIGINT stays ignored: the run goes on until SIGTERM stops it (alive $alive, rc $rc)" \
    sh -c "[ $alive -eq 0 ] && [ $rc -eq 3 ] && grep -q 'stopped by SIGTERM' stoperr7"
# without --save nothing is caught: SIGTERM ends the run as it always did
# shellcheck disable=SC2086
"$BIN" $stop --steps 100000 --log stop4.log >/dev/null 2>&1 &
pid=$!
running 2 stop4.log
kill -TERM $pid
wait $pid
rc=$?
check "without --save, SIGTERM ends the run at once (rc $rc)" [ $rc -eq 143 ]
# --time-limit: stops before a step that would end past it
# shellcheck disable=SC2086
"$BIN" $stop --steps 100000000 --time-limit 0.02 --save ckt --log stop5.log >/dev/null 2>err
rc=$?
n=$(losses stop5.log | wc -l)
check "--time-limit 0.02 (1.2 s): exit 3 after $n steps, the checkpoint of the last" \
    sh -c "[ $rc -eq 3 ] && [ $n -ge 1 ] && [ \"\$(cat ckt/latest)\" = step-$(printf %08d "$n") ]"
check "... saying so" grep -q "stopped by --time-limit 0.02 (one more step would end past it) after step $n of 100000000: checkpoint ckt/" err
# shellcheck disable=SC2086
"$BIN" $stop --steps 100000000 --time-limit 0.01 >/dev/null 2>err
check "--time-limit without --save: exit 3, nothing saved, one line" \
    sh -c "[ $? -eq 3 ] && [ \$(wc -l <err) -eq 1 ] && grep -q '(no --save: nothing saved)' err"
"$BIN" --data train.txt --time-limit -1 >/dev/null 2>err
check "--time-limit -1 is a usage error" sh -c "[ $? -eq 2 ] && grep -q -- '--time-limit must be >= 0 minutes' err"

# ---------------------------------------------------------------- a non-finite gradient
# an infinite gradient at step 6 under a finite loss: the run stops there with one
# line, before AdamW writes NaN into the parameters; the latest checkpoint is step 6's
FAKE_INF_GRAD_STEP=6 "$BIN" --data train.txt --batch 8 --seq 16 --steps 10 --save ckinf --save-every 1 \
    --log inf.log --quiet >/dev/null 2>err
rc=$?
check "an infinite gradient at step 6 (finite loss): exit 1, one line naming the norm and the step" \
    sh -c "[ $rc -eq 1 ] && [ \$(wc -l <err) -eq 1 ] && grep -q 'the gradient norm became inf at step 6 (the loss was finite)' err"
check "... the latest checkpoint is from before it (step-00000006), no later one" \
    sh -c "[ \"\$(cat ckinf/latest)\" = step-00000006 ] && [ ! -e ckinf/step-00000007 ]"
"$BIN" --data train.txt --batch 8 --seq 16 --steps 7 --load ckinf --log inf2.log --quiet >/dev/null 2>&1
rc=$?
l=$(losses inf2.log)
check "... and it resumes (without the fault) with a finite loss ($l)" \
    awk -v rc=$rc -v l="$l" 'BEGIN { exit !(rc == 0 && l ~ /^[0-9]+\.[0-9]+$/) }'

# ---------------------------------------------------------------- --keep-last
# the two newest step directories stay; what the program did not write is left alone
mkdir -p ckk/step-00000001/sub ckk/notes
touch ckk/step-00000001/model.safetensors ckk/step-00000003.bak
"$BIN" --data train.txt --batch 8 --seq 16 --steps 10 --save ckk --save-every 2 --keep-last 2 --quiet >/dev/null 2>kerr
rc=$?
check "--keep-last 2, --save-every 2, 10 steps: step-8 and step-10 kept, 2, 4 and 6 removed, latest step-10" \
    sh -c "[ $rc -eq 0 ] && [ -f ckk/step-00000008/model.safetensors ] && [ -f ckk/step-00000010/optimizer.safetensors ] &&
           [ ! -e ckk/step-00000002 ] && [ ! -e ckk/step-00000004 ] && [ ! -e ckk/step-00000006 ] &&
           [ \"\$(cat ckk/latest)\" = step-00000010 ]"
check "... a step directory holding a directory is left whole, with a warning; other names untouched" \
    sh -c "[ -f ckk/step-00000001/model.safetensors ] && [ -d ckk/step-00000001/sub ] && [ -d ckk/notes ] &&
           [ -f ckk/step-00000003.bak ] && grep -q 'warning: --keep-last 2: cannot remove ckk/step-00000001 ' kerr"
"$BIN" --data train.txt --batch 8 --seq 16 --steps 12 --load ckk --save ckk --keep-last 1 --quiet >/dev/null 2>&1
check "--keep-last 1 on a resumed run: only the step just saved (and the one left above)" \
    sh -c "[ \$(ls ckk | grep -c '^step-[0-9]*\$') -eq 2 ] && [ -d ckk/step-00000012 ] && [ -d ckk/step-00000001 ]"
"$BIN" --data train.txt --keep-last -1 >/dev/null 2>err
check "--keep-last -1 is a usage error" sh -c "[ $? -eq 2 ] && grep -q -- '--keep-last must be >= 0' err"

# --eod-mask-loss: the end-of-text token from --eod-token (a byte model has no tokenizer's);
# no loss on the target after each newline, so other losses; usage errors in one line
"$BIN" --data train.txt --batch 8 --seq 16 --steps 3 --log eod0.jsonl --quiet >/dev/null 2>&1
"$BIN" --data train.txt --batch 8 --seq 16 --steps 3 --log eod1.jsonl --eod-mask-loss 1 --eod-token 10 >/dev/null 2>err
rc=$?
l0=$(losses eod0.jsonl | tr '\n' ' ') l1=$(losses eod1.jsonl | tr '\n' ' ')
check "--eod-mask-loss 1 --eod-token 10: trains, says so, other losses than without ($l1 against $l0)" \
    sh -c "[ $rc -eq 0 ] && grep -q 'data: --eod-mask-loss: no loss on the token after token 10 (--eod-token)' err &&
           [ \$(grep -c '\"loss\"' eod1.jsonl) -eq 3 ] && [ '$l0' != '$l1' ] && [ -n '$l0' ]"
for bad in "--eod-mask-loss 1|no end-of-text token is known for this model's vocabulary of 256 (no tokenizer): give --eod-token ID" \
    "--eod-mask-loss 2|--eod-mask-loss must be 0 or 1 (got 2)" \
    "--eod-token 10|--eod-token is the token --eod-mask-loss 1 masks after: give both" \
    "--eod-mask-loss 1 --eod-token 300|--eod-token 300 is outside the model's vocabulary of 256"; do
    "$BIN" --data train.txt --steps 1 ${bad%%|*} >/dev/null 2>err
    rc=$?
    check "${bad%%|*}: a usage error, one line ($(head -1 err))" \
        sh -c "[ $rc -eq 2 ] && grep -qF -- \"${bad#*|}\" err && [ \$(grep -c error err) -eq 1 ]"
done

# ---------------------------------------------------------------- sampling, grads
"$BIN" --load ck --steps 0 --sample 20 --prompt ab --quiet >s1 2>err
rc=$?
"$BIN" --load ck --steps 0 --sample 20 --prompt ab --quiet >s2 2>&1
check "--sample 20 prints prompt + 20 bytes + newline" sh -c "[ $rc -eq 0 ] && [ \$(wc -c <s1) -eq 23 ] && head -c 2 s1 | grep -q ab"
check "sampling is deterministic" cmp -s s1 s2
"$BIN" --load ck --steps 0 --sample 30 --temperature 0 --top-k 5 --quiet >s3 2>err
check "greedy sampling runs" sh -c "[ $? -eq 0 ] && [ \$(wc -c <s3) -eq 32 ]"
"$BIN" --load ck --steps 0 --sample 20 --prompt ab --top-p 1 --quiet >s4 2>err
check "--top-p 1 samples as without it" cmp -s s1 s4
"$BIN" --load ck --steps 0 --sample 200 --prompt ab --top-p 0.3 --quiet >s5 2>err
rc=$?
"$BIN" --load ck --steps 0 --sample 200 --prompt ab --quiet >s6 2>&1
# every token --top-p 0.3 drew is in the nucleus of the bigram's distribution after the one
# before (the fewest most likely bytes reaching 0.3: W[prev] + bias of the checkpoint, softmax);
# the draws without it leave the nucleus, so the check can fail
nucleus() { python3 - "$1" "$2" ck <<'PY'
import glob, json, math, struct, sys
out, p = open(sys.argv[1], "rb").read().rstrip(b"\n"), float(sys.argv[2])
f = open(sorted(glob.glob(sys.argv[3] + "/step-*/model.safetensors"))[-1], "rb").read()
n = struct.unpack("<Q", f[:8])[0]; hdr = json.loads(f[8:8 + n])
def tensor(name):
    a, b = hdr[name]["data_offsets"]
    return struct.unpack("<%df" % ((b - a) // 4), f[8 + n + a:8 + n + b])
W, bias = tensor("wte.weight"), tensor("bias")
inside = wide = 0
for prev, tok in zip(out[1:-1], out[2:]):   # after the prompt's first byte
    logit = [W[prev * 256 + j] + bias[j] for j in range(256)]
    mx = max(logit); e = [math.exp(x - mx) for x in logit]; z = sum(e)
    order = sorted(range(256), key=lambda j: (-logit[j], j)); keep, acc = [], 0.0
    for j in order:
        if acc >= p * z: break
        keep.append(j); acc += e[j]
    inside += tok in keep; wide += len(keep) > 1
print(f"  {inside} of {len(out) - 2} draws in the nucleus ({wide} of them from more than one byte)")
sys.exit(0 if inside == len(out) - 2 and wide > len(out) // 2 else 1)
PY
}
drew_in() { [ "$rc" -eq 0 ] && [ "$(wc -c <s5)" -eq 203 ] && nucleus s5 0.3; }
check "--top-p 0.3: every draw in the nucleus" drew_in
left() { ! nucleus s6 0.3 >/dev/null; }
check "... which draws without --top-p leave" left
"$BIN" --data train.txt --steps 5 --sample 4 --sample-every 2 --log se1.jsonl --quiet >se1.out 2>err
rc=$?
"$BIN" --data train.txt --steps 5 --sample 4 --log se0.jsonl --quiet >se0.out 2>&1
sampled_every() { [ "$rc" -eq 0 ] &&
    [ "$(grep -a '^--- sample' se1.out | tr '\n' ,)" = '--- sample at step 2 ---,--- sample at step 4 ---,' ] &&
    [ "$(wc -c <se1.out)" -eq $((3 * 6 + 2 * 25)) ] && cmp -s <(tail -c 6 se1.out) se0.out &&
    [ -n "$(losses se0.jsonl)" ] && [ "$(losses se0.jsonl)" = "$(losses se1.jsonl)" ]; }
check "--sample-every 2 over 5 steps: samples after steps 2 and 4, then --sample's; the losses as without" sampled_every
"$BIN" --data train.txt --steps 1 --eval-mc mc.jsonl --eval-mc-examples -1 >/dev/null 2>err
rc=$?
check "--eval-mc-examples -1: a usage error" sh -c "[ $rc -eq 2 ] && grep -q -- '--eval-mc-examples must be >= 0 (got -1)' err"
"$BIN" --data train.txt --steps 1 --eval-mc no_such.jsonl >/dev/null 2>err
rc=$?
check "--eval-mc of a missing file: exit 1 naming it, before training" \
    sh -c "[ $rc -eq 1 ] && grep -q 'cannot open no_such.jsonl' err && ! grep -q '^step' err"
"$BIN" --data train.txt --steps 1 --sample 2 --sample-every -1 >/dev/null 2>err
rc=$?
check "--sample-every -1: a usage error" sh -c "[ $rc -eq 2 ] && grep -q -- '--sample-every must be >= 0 (got -1)' err"
"$BIN" --load ck --steps 0 --sample 2 --top-p 0 >/dev/null 2>err
rc=$?
check "--top-p 0: a usage error ($(head -1 err))" sh -c "[ $rc -eq 2 ] && grep -q -- '--top-p must be in (0, 1\] (got 0)' err"
"$BIN" --data train.txt --steps 1 --dump-grads g.safetensors --quiet >/dev/null 2>err
check "--dump-grads writes a safetensors file with the parameter names" \
    sh -c "[ $? -eq 0 ] && [ -s g.safetensors ] && grep -a -q '\"wte.weight\"' g.safetensors"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
