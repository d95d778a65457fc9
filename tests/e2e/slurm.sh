#!/usr/bin/env bash
# Starting under Slurm: a private one-node Slurm cluster (munged, slurmctld and
# slurmd in a scratch directory, on loopback ports, nothing of the machine's
# own configuration touched) and the programs started by `srun --mpi=pmix`
# (Open MPI's ranks wired up by Slurm's PMIx, no mpirun) and by mpirun inside
# an `salloc` allocation (Open MPI launching through Slurm). The losses must be
# the single-rank ones, as under mpirun.
source "$(dirname "$0")/lib.sh"
for b in srun salloc sinfo slurmctld slurmd munged; do
  command -v $b > /dev/null || { echo "FAIL $b not found (scripts/setup.sh installs slurm-wlm and munge)"; exit 1; }
done

# ---- the cluster ------------------------------------------------------------
sl=$w/slurm; mkdir -p $sl/munge $sl/state $sl/spool $sl/log $sl/tmp
chmod 755 $w $sl; chmod 700 $sl/munge
head -c 1024 /dev/urandom > $sl/munge/munge.key; chmod 400 $sl/munge/munge.key
# job ids from the process id: Open MPI names its shared-memory segments after
# the PMIx namespace (slurm.pmix.JOB.STEP), so two clusters both at job 1 on one
# machine would map each other's segments (a crash or a hang); TmpFS below keeps
# Slurm's PMIx directories (spmix_appdir_UID_JOB.STEP) in the scratch directory
first_job=$(( ($$ % 60000) * 1000 + 1 ))
host=$(hostname -s)
user=$(id -un)
export SLURM_CONF=$sl/slurm.conf
# write_conf PORT: the cluster's slurm.conf, slurmctld on PORT and slurmd on PORT+1
write_conf() { cat > $sl/slurm.conf <<EOF
ClusterName=shardc-test
FirstJobId=$first_job
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$1
SlurmdPort=$(($1 + 1))
MessageTimeout=5
AuthType=auth/munge
AuthInfo=socket=$sl/munge/sock
CredType=cred/munge
SlurmUser=$user
SlurmdUser=$user
StateSaveLocation=$sl/state
SlurmdSpoolDir=$sl/spool
TmpFS=$sl/tmp
SlurmctldPidFile=$sl/slurmctld.pid
SlurmdPidFile=$sl/slurmd.pid
SlurmctldLogFile=$sl/log/slurmctld.log
SlurmdLogFile=$sl/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
NodeName=$host NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
}
# stop_daemons [all]: stop slurmd and slurmctld (munged too with "all") and
# wait for them, at most 10 s
stop_daemons() {
  local pids="" f
  for f in $sl/slurmd.pid $sl/slurmctld.pid ${1:+$sl/munge/pid}; do [ -f $f ] && pids="$pids $(cat $f)"; done
  [ -n "$pids" ] && kill $pids 2> /dev/null
  for i in $(seq 40); do kill -0 $pids 2> /dev/null || break; sleep 0.25; done
  rm -f $sl/slurmd.pid $sl/slurmctld.pid
}
stop_cluster() { # before removing the daemons' files
  stop_daemons all
  [ "$fail" -eq 0 ] || tail -n 15 $sl/log/slurmctld.log $sl/log/slurmd.log
  rm -rf "$w"
}
trap stop_cluster EXIT
# every start and query bounded: a daemon that does not answer costs a retry on
# other ports (the first pair, from the process id, may be taken), not the
# test's whole timeout
idle() { [ "$(timeout 10 sinfo -h -o %t 2> /dev/null)" = idle ]; }
timeout 20 munged -f --socket=$sl/munge/sock --key-file=$sl/munge/munge.key --log-file=$sl/log/munged.log \
  --pid-file=$sl/munge/pid --seed-file=$sl/munge/seed || { cat $sl/log/munged.log; echo "FAIL munged"; exit 1; }
for try in 1 2 3; do
  port=$(( 20000 + (($$ + 7919 * (try - 1)) % 20000) * 2 ))
  write_conf $port
  echo "starting slurmctld and slurmd on ports $port and $((port + 1)) (try $try of 3)"
  timeout 20 slurmctld -f $SLURM_CONF -i && timeout 20 slurmd -f $SLURM_CONF &&
    for i in $(seq 60); do idle && break; sleep 0.5; done
  idle && break
  timeout 10 sinfo; tail -n 20 $sl/log/slurmctld.log $sl/log/slurmd.log
  stop_daemons
  [ $try -lt 3 ] || { echo "FAIL the one-node cluster did not come up"; exit 1; }
done
ok "one-node Slurm cluster up ($(sinfo -V), node $host idle)"

# ---- programs under srun ----------------------------------------------------
"$shardc" build "$src/examples/tinygpt.model" -o tg --set n_layer=2 --set n_embd=64 --set n_head=4 > /dev/null
"$shardc" build "$src/examples/tinygpt.model" -o tg22 --tp 2 --pp 2 --set n_layer=2 --set n_embd=64 \
  --set n_head=4 > /dev/null
args="--data $w/text.txt --batch 8 --seq 32 --steps 20 --lr 3e-3 --warmup 2 --grad-clip 1.0 --quiet --threads 1"
./tg $args --log one.jsonl
srun="timeout 120 srun --mpi=pmix --chdir=$w --kill-on-bad-exit=1"

$srun -n 2 ./tg $args --dp 2 --log srun-dp2.jsonl 2> srun-dp2.err
check "srun -n 2 --dp 2 (ranks from Slurm's PMIx) gives the single-rank losses" same one.jsonl srun-dp2.jsonl 1e-5
$srun -n 2 ./tg ${args/--quiet/} --steps 1 --dp 2 > srun-log.out 2> srun-log.err
check "both ranks took part (rank 1 of 2 logged its memory)" grep -q "rank 1 (dp 1/2)" srun-log.err

$srun -n 4 ./tg22 $args --log srun-tp2pp2.jsonl 2> srun-tp2pp2.err
check "srun -n 4, tensor 2 x pipeline 2, gives the single-rank losses" same one.jsonl srun-tp2pp2.jsonl 1e-5

$srun -n 3 ./tg $args --dp 2 > srun-ws.out 2> srun-ws.err; rc=$?
check "srun -n 3 with --dp 2: a clear error and a non-zero exit (rc $rc), no hang" \
  [ $rc -ne 0 -a $rc -ne 124 ]
check "the error names the numbers" grep -q "2\*1\*1 = 2 but the world has 3 ranks" srun-ws.err

# srun without PMIx: Open MPI cannot start; one line from the program, not a page from MPI_Init
$srun --mpi=none -n 2 ./tg $args --dp 2 > srun-nopmix.out 2> srun-nopmix.err; rc=$?
check "srun --mpi=none: exit 2 (rc $rc) with one line saying to use --mpi=pmix" \
  [ $rc -eq 2 -a "$(grep -c "error: started by srun without PMIx (--mpi=none).*srun --mpi=pmix" srun-nopmix.err)" = 1 ]

# ---- preemption: Slurm signals the job's tasks (sbatch --signal=USR1@T does
# the same T seconds before the time limit); they stop after one step, save it, exit 3
$srun -n 2 -J shardc-stop ./tg ${args/--steps 20/--steps 100000} --dp 2 --lr-schedule constant --save $w/cks \
  --log srun-stop.jsonl > srun-stop.out 2> srun-stop.err &
sp=$!
logged 5 srun-stop.jsonl
scancel --signal=USR1 --name=shardc-stop
wait $sp; rc=$?
n=$(grep -c '"loss"' srun-stop.jsonl)
check "scancel --signal=USR1: srun exits 3 after $n steps (rc $rc), the checkpoint of step $n the latest" \
  sh -c "[ $rc -eq 3 ] && [ $n -ge 5 ] && [ \"\$(cat $w/cks/latest)\" = step-$(printf %08d $n) ]"
check "... rank 0 says so" grep -q "stopped by SIGUSR1 after step $n of 100000: checkpoint $w/cks/step-" srun-stop.err
# ---- mpirun inside an allocation (Open MPI starts its daemons through Slurm) --
timeout 120 salloc -n 2 --chdir=$w mpirun --bind-to none ./tg $args --dp 2 --log salloc-dp2.jsonl \
  > salloc.out 2>&1
check "salloc -n 2 mpirun --dp 2 gives the single-rank losses" same one.jsonl salloc-dp2.jsonl 1e-5

echo "last losses: one rank $(tail -n 1 one.jsonl | cut -c1-32), srun dp=2 $(tail -n 1 srun-dp2.jsonl | cut -c1-32)," \
  "srun tp=2 x pp=2 $(tail -n 1 srun-tp2pp2.jsonl | cut -c1-32), salloc $(tail -n 1 salloc-dp2.jsonl | cut -c1-32)"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
