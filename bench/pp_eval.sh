#!/bin/bash
# pp_eval.sh SHARDC_A SHARDC_B [TRAIN VAL]: evaluation through a pipeline,
# A/B. Builds tinygpt (4 layers of 256) at pp=2 with each compiler given
# (each links its own runtime) and times a validation pass alone
# (--steps 0: one evaluation of 128 batches of 16 x 128 in 4 microbatches)
# on 2 ranks, 3 rounds alternating; prints the wall time of each run and
# the validation loss (which must not change).
set -e
A=${1:?usage: pp_eval.sh SHARDC_A SHARDC_B [TRAIN VAL]}; B=${2:?}; TRAIN=${3:-train.txt}; VAL=${4:-val.txt}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
m=$(dirname "$0")/../examples/tinygpt.model
cfg="--set n_layer=4 --set n_embd=256 --set n_head=4"
"$A" build "$m" $cfg --pp 2 -o ev_a > /dev/null 2>&1
"$B" build "$m" $cfg --pp 2 -o ev_b > /dev/null 2>&1
run="--data $TRAIN --val-data $VAL --batch 16 --seq 128 --microbatches 4 --steps 0 --eval-batches 128 --threads 1"
for i in 1 2 3; do
  for b in a b; do
    t0=$(date +%s.%N)
    OMP_NUM_THREADS=1 mpirun --oversubscribe --bind-to none -np 2 ./ev_$b $run --pp 2 > ev_$b.$i.txt 2>&1
    t1=$(date +%s.%N)
    echo "$b round $i: $(python3 -c "print('%.2f s' % ($t1 - $t0))"), $(grep -o 'val loss [0-9.]*' ev_$b.$i.txt)"
  done
done
