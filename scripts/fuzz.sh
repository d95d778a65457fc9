#!/usr/bin/env bash
# fuzz.sh: fuzz the shardc front end by hand.
#
#   scripts/fuzz.sh [SECONDS] [libFuzzer flags...]     (default 60 s)
#
# Builds the fuzz_front target (clang + libFuzzer + ASan/UBSan) in $SHARDC_BUILD
# (default build/) and runs tests/fuzz/run_fuzz.sh: seeds from examples/,
# stdlib/, tests/diag/ and tests/fuzz/corpus/, the dictionary
# tests/fuzz/model.dict, new coverage kept in BUILD/fuzz/corpus. Every crash,
# leak, timeout or OOM is saved as tests/fuzz/corpus/crash-<sha1> (replayed by
# the front_asan ctest from then on) and the run fails.
#
#   FUZZ_JOBS=N scripts/fuzz.sh 600    explore with N processes (-fork=N) and
#                                      keep going after crashes, to collect
#                                      several distinct bugs in one run
#   SHARDC_FUZZ_BACK=1                 also fuzz the back end (autodiff, memory
#                                      plan) on inputs the front end accepts
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
build=${SHARDC_BUILD:-build}
secs=${1:-60}
[ $# -gt 0 ] && shift
if ! [[ "$secs" =~ ^[0-9]+$ ]]; then
  echo "usage: scripts/fuzz.sh [SECONDS] [libFuzzer flags...]" >&2
  exit 2
fi

[ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" >/dev/null
cmake --build "$build" --target fuzz_front -j"$(nproc)"
bin="$build/fuzz/fuzz_front"
if [ ! -x "$bin" ]; then
  echo "fuzz.sh: no $bin: clang with libFuzzer was not found when $build was configured" >&2
  echo "fuzz.sh: install clang and libclang-rt-dev (scripts/setup.sh), then rerun cmake" >&2
  exit 1
fi

extra=()
if [ -n "${FUZZ_JOBS:-}" ]; then
  extra+=(-fork="$FUZZ_JOBS" -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
fi
exec tests/fuzz/run_fuzz.sh "$bin" "$secs" "$src" "$build/fuzz" "${extra[@]}" "$@"
