# racecheck.sh SRC BUILD [build|check]: the CUDA kernels' race check on the CPU (docs/cuda.md,
# "Race check on the CPU"). build: builds test_kernels_emu with ThreadSanitizer in BUILD (the
# kernels instrumented, the emulator's engine not: it tells TSan the orders CUDA gives); check:
# runs it (both, without the third argument):
#  - racy: kernels with a race on purpose (a shared slot read without __syncthreads, a write
#    between two barriers read before the second, lanes without __syncwarp, blocks adding to
#    one value without an atomic) are each reported at their 'race:' line, and nothing else;
#  - clean: the same kernels with their barriers and atomics, and the library's kernels with
#    shared memory, warp operations or shared outputs, give no report.
set -u
src=$(realpath "$1"); b=$2 what=${3:-all}
source "$src/tests/check.sh"
# the host's OpenMP kernels (the references) on one thread, since TSan does not see libgomp's
# orders; the emulator's blocks on two, so that blocks of one grid run on different threads
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 EMU_THREADS=2 TSAN_OPTIONS="exitcode=66"
if [ "$what" != check ]; then
  mkdir -p "$b"
  check "configure a ThreadSanitizer build (SHARDC_SANITIZE_THREAD=ON)" \
    bash -c "cmake -S '$src' -B '$b' -DSHARDC_SANITIZE_THREAD=ON > '$b/configure.log' 2>&1 || { tail -20 '$b/configure.log'; false; }"
  check "build test_kernels_emu with the kernels under ThreadSanitizer" \
    bash -c "cmake --build '$b' --target test_kernels_emu -j '$(getconf _NPROCESSORS_ONLN)' > '$b/build.log' 2>&1 || { tail -20 '$b/build.log'; false; }"
fi
t=$b/test_kernels_emu
[ -x "$t" ] || { echo "$pass passed, $fail failed"; exit 1; }
if [ "$what" = build ]; then
  echo "$pass passed, $fail failed"
  [ "$fail" -eq 0 ]; exit
fi

out=$("$t" --races racy 2>&1); rc=$?
printf '%s\n' "$out" | grep -E "^(SUMMARY|PASS|FAIL)"
check "racy: ThreadSanitizer's exit status 66 (got $rc)" [ "$rc" -eq 66 ]
for k in block phase warp grid; do
  line=$(grep -n "/\* race: $k \*/" "$src/tests/cuda/test_kernels_emu.cpp" | cut -d: -f1)
  # one of a report's two accesses (which comes second depends on the resume order)
  check "racy: race_${k}_kernel<0> reported, an access at test_kernels_emu.cpp:$line" \
    grep -Eq "#0 race_${k}_kernel<0> .*test_kernels_emu.cpp:$line " <<< "$out"
done
n=$(grep -c "^SUMMARY: ThreadSanitizer" <<< "$out")
check "racy: those four reports and no other ($n)" [ "$n" -eq 4 ]

out=$("$t" --races clean 2>&1); rc=$?
printf '%s\n' "$out" | grep -E "^(SUMMARY|FAIL)|passed"
check "clean: the ordered kernels and the library's pass, exit status 0 (got $rc)" \
  bash -c '[ "$1" -eq 0 ] && grep -Eq "^[1-9][0-9]* passed, 0 failed$" <<< "$2"' _ "$rc" "$out"
check "clean: no ThreadSanitizer report" bash -c '! grep -q "ThreadSanitizer" <<< "$1"' _ "$out"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
