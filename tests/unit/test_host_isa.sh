#!/usr/bin/env bash
# test_host_isa.sh FAKE_PROGRAM_V4: the start-up check of the host kernels'
# x86-64 level (sr_host_isa_check). FAKE_PROGRAM_V4 is tests/unit/fake_program.c
# linked with a runtime/host/backend.c that says its kernels were built for
# x86-64-v4 (AVX-512): on a CPU without AVX-512 it must stop before any
# kernel runs, with one line naming the level and what to do, and exit 1; on
# a CPU with it, train. Prints one line per check, "N passed, M failed".
set -u
BIN=${1:?usage: test_host_isa.sh FAKE_PROGRAM_V4}
W=$(mktemp -d "${TMPDIR:-/tmp}/test_host_isa.XXXXXX")
trap 'rm -rf "$W"' EXIT
cd "$W" || exit 2
pass=0 fail=0
check() { local name=$1; shift; if "$@"; then echo "ok   - $name"; pass=$((pass + 1)); else echo "FAIL - $name"; fail=$((fail + 1)); fi; }
for i in $(seq 1 200); do echo "the quick brown fox jumps over the lazy dog ($i)."; done > train.txt
"$BIN" --data train.txt --steps 2 --batch 2 --seq 16 --quiet --log l.jsonl > out 2> err; rc=$?
v4=1
for f in avx512f avx512bw avx512cd avx512dq avx512vl; do grep -qw $f /proc/cpuinfo || v4=0; done
if [ $v4 = 1 ]; then
  check "a CPU with x86-64-v4: the program trains (exit $rc)" [ $rc -eq 0 -a "$(grep -c loss l.jsonl)" = 2 ]
else
  check "a CPU without x86-64-v4: exit 1 (got $rc), nothing trained" [ $rc -eq 1 -a ! -s l.jsonl ]
  check "one line: $(head -c 200 err)" [ "$(wc -l < err)" = 1 ]
  check "it names the level and the way out" grep -q "x86-64-v4.*SHARDC_HOST_ARCH=none" err
fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
