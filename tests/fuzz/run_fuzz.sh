#!/usr/bin/env bash
# run_fuzz.sh: fuzz the shardc front end with libFuzzer for a while.
#
#   run_fuzz.sh FUZZ_BIN SECONDS SRC_DIR WORK_DIR [libFuzzer flags...]
#   run_fuzz.sh --skip REASON        (exit 77: ctest reports the test skipped)
#
# Seeds: SRC/examples, SRC/stdlib, SRC/tests/diag (+ modules/) and the
# regression corpus SRC/tests/fuzz/corpus; inputs that find new coverage
# accumulate in WORK_DIR/corpus across runs. The fuzzer runs in
# SRC/tests/diag, so `use "modules/..."` finds the diag helper modules.
#
# Fails (exit 1) when libFuzzer finds a crash, a sanitizer error, a leak, a
# timeout (-timeout=5 s per input) or an out-of-memory (-rss_limit_mb=2048);
# each such input is copied to SRC/tests/fuzz/corpus/crash-<sha1>, where it
# becomes a regression input of the front_asan test, and its path is printed.
set -u

if [ "${1:-}" = "--skip" ]; then
  echo "fuzz_front_60s skipped: ${2:-libFuzzer is not available}"
  exit 77
fi
if [ $# -lt 4 ]; then
  echo "usage: $0 FUZZ_BIN SECONDS SRC_DIR WORK_DIR [libFuzzer flags...]" >&2
  exit 2
fi
bin=$(realpath "$1") secs=$2 src=$(cd "$3" && pwd) work=$4
shift 4
if [ ! -x "$bin" ]; then
  echo "run_fuzz: $bin is missing: build the fuzz_front target first" >&2
  exit 1
fi
mkdir -p "$work"
work=$(cd "$work" && pwd)
regress="$src/tests/fuzz/corpus"
mkdir -p "$work/corpus" "$work/artifacts" "$regress"
rm -rf "$work/seeds" "$work/artifacts"/* "$work"/replay-*.log
mkdir -p "$work/seeds"

# seeds: every .model of the tree and the regression corpus, flattened
n=0
for d in examples stdlib tests/diag tests/diag/modules; do
  for f in "$src/$d"/*.model; do
    [ -f "$f" ] || continue
    cp "$f" "$work/seeds/$(echo "$d" | tr / _)_$(basename "$f")"
    n=$((n+1))
  done
done
# The regression corpus is replayed first, one input at a time: an input that
# still fails is reported (and fails the run) but is not used as a seed, since
# libFuzzer stops at a failing seed and would not fuzz at all.
known=0
for f in "$regress"/*; do
  [ -f "$f" ] || continue
  flog="$work/replay-$(basename "$f").log"
  if (cd "$src/tests/diag" && "$bin" -timeout=5 -rss_limit_mb=2048 -error_exitcode=1 \
        -timeout_exitcode=1 "$f") >"$flog" 2>&1; then
    rm -f "$flog"
    cp "$f" "$work/seeds/corpus_$(basename "$f")"
    n=$((n+1))
  else
    known=$((known+1))
    why=$(grep -m1 -E "SUMMARY:|ERROR: libFuzzer|runtime error" "$flog" | cut -c1-200)
    echo "run_fuzz: regression input still fails: $f"
    echo "run_fuzz:   ${why:-see $flog}"
  fi
done

dict="$src/tests/fuzz/model.dict"
log="$work/fuzz.log"
echo "run_fuzz: fuzzing for ${secs}s: $n seeds, corpus $work/corpus, log $log"
# -error_exitcode: libFuzzer's default (77) would read as "skipped" to ctest
(cd "$src/tests/diag" &&
  "$bin" -max_total_time="$secs" -timeout=5 -rss_limit_mb=2048 -max_len=8192 \
    -dict="$dict" -artifact_prefix="$work/artifacts/" -print_final_stats=1 \
    -error_exitcode=1 -timeout_exitcode=1 "$@" \
    "$work/corpus" "$work/seeds") >"$log" 2>&1
rc=$?

found=0
for a in "$work/artifacts"/crash-* "$work/artifacts"/leak-* "$work/artifacts"/timeout-* \
         "$work/artifacts"/oom-* "$work/artifacts"/deadly*; do
  [ -f "$a" ] || continue
  found=$((found+1))
  kind=$(basename "$a"); kind=${kind%%-*}
  sha=$(sha1sum "$a" | cut -d' ' -f1)
  dest="$regress/crash-$sha"
  for r in "$regress"/*; do   # the same input under another name?
    [ -f "$r" ] && [ "$(sha1sum "$r" | cut -d' ' -f1)" = "$sha" ] && dest=$r
  done
  if [ -f "$dest" ]; then
    echo "run_fuzz: $kind input $a is already in the regression corpus: $dest"
  else
    cp "$a" "$dest"
    echo "run_fuzz: $kind input saved as $dest"
  fi
  echo "run_fuzz: reproduce with: (cd $src/tests/diag && SHARDC_FUZZ_VERBOSE=1 $bin $dest)"
done

if [ $rc -ne 0 ] || [ $found -ne 0 ]; then
  echo "run_fuzz: FAILED (libFuzzer exit $rc, $found new failing input(s)); end of $log:"
  # the sanitizer report, the stack and the input's summary
  grep -n -m1 -E "ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error|internal compiler error|==[0-9]+==" "$log" >/dev/null &&
    sed -n "$(grep -n -m1 -E "ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error|==[0-9]+==ERROR" "$log" | cut -d: -f1),\$p" "$log" | head -80 ||
    tail -60 "$log"
  exit 1
fi
tail -15 "$log"
if [ $known -ne 0 ]; then
  echo "run_fuzz: FAILED: no new failure in ${secs}s, but $known regression input(s) of $regress still fail"
  exit 1
fi
echo "run_fuzz: OK: no crash, leak or timeout in ${secs}s"
exit 0
