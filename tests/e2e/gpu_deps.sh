#!/usr/bin/env bash
# gpu_deps.sh SRCDIR: the path scripts/gpu-check.sh takes on a GPU machine with
# no MPI, OpenBLAS, bison or flex and no package registry, run here so it
# cannot rot unseen: scripts/gpu-deps.sh fetches the .deb files (apt), and
# gpu_deps_env unpacks them into a private prefix; then CMake must take the
# unpacked mpicc, bison, flex and OpenBLAS, the comm test must pass under the
# unpacked mpirun, and a program shardc builds must link and load the
# unpacked libmpi and OpenBLAS and train at dp=2. The system's copies stay
# installed here, so the last checks read which files the programs load.
# Exit 77 (skipped) when apt cannot download (no network).
set -u
src=$(realpath "$1")
source "$src/tests/check.sh"
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
cd "$w"
if ! bash "$src/scripts/gpu-deps.sh" "$w/debs" > fetch.txt 2>&1; then
  cat fetch.txt; echo "skipped: apt-get download failed"; exit 77
fi
check "gpu-deps.sh: $(tail -1 fetch.txt | cut -c1-60)" bash -c "ls '$w'/debs/*.deb | grep -q openmpi-bin"
source "$src/scripts/gpu-deps-env.sh"
p=$w/prefix
check "gpu_deps_env unpacks into $p and the unpacked mpicc and bison run" gpu_deps_env "$w/debs" "$p"
check "mpicc, mpirun, bison, flex on PATH are the unpacked ones" bash -c \
  "[ \"\$(command -v mpicc)\" = '$p/usr/bin/mpicc' ] && [ \"\$(command -v mpirun)\" = '$p/usr/bin/mpirun' ] &&
   [ \"\$(command -v bison)\" = '$p/usr/bin/bison' ] && [ \"\$(command -v flex)\" = '$p/usr/bin/flex' ]"
check "the unpacked mpicc compiles and links against the prefix ($(mpicc -showme:link 2>&1 | cut -c1-80))" \
  bash -c "mpicc -showme:link | grep -q -- '-L$p/'"
# without CUDA (no nvcc, no emulator, no NCCL): its nvcc and cuDNN compiles, the same in every
# build type, take none of the unpacked tools and are the main build's (they were 160 s of 194)
cmake -S "$src" -B b -DCMAKE_BUILD_TYPE=Release -DSHARDC_CUDA_EMU=OFF -DSHARDC_NCCL=OFF -DSHARDC_NVCC_EXECUTABLE= \
  "${GPU_DEPS_CMAKE[@]}" > cmake.txt 2>&1
check "CMake configures with the unpacked tools" grep -q "Build files have been written" cmake.txt
check "CMake's cache names the unpacked mpicc, bison, flex and OpenBLAS" bash -c \
  "grep -q '^MPI_C_COMPILER:FILEPATH=$p/' b/CMakeCache.txt && grep -q '^BISON_EXECUTABLE:FILEPATH=$p/' b/CMakeCache.txt &&
   grep -q '^FLEX_EXECUTABLE:FILEPATH=$p/' b/CMakeCache.txt && grep -q '^OPENBLAS_LIB:FILEPATH=$p/' b/CMakeCache.txt"
# the scratch directory goes with the test: a failed build's errors are shown here, for CI's log
# (this is the suite's one Release build, -O3: it has caught a warning the -O2 builds did not)
cmake --build b -j"$(nproc)" --target shardc test_comm > build.txt 2>&1
check "shardc and test_comm build ($(grep -c -i ' error' build.txt) error lines)" test -x b/test_comm -a -x b/shardc
test -x b/test_comm -a -x b/shardc || { grep -i -m 12 'error' build.txt; tail -n 15 build.txt; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
timeout 120 mpirun --oversubscribe --bind-to none -np 2 b/test_comm > comm.txt 2>&1
check "test_comm under the unpacked mpirun: $(tail -1 comm.txt)" grep -q " passed, 0 failed" comm.txt
for i in $(seq 20); do cat "$src"/docs/*.md; done > text.txt
b/shardc build "$src/examples/tinygpt.model" -o tg > sb.txt 2>&1
check "shardc build links the program against the unpacked libmpi and OpenBLAS" bash -c \
  "ldd tg | grep -q 'libmpi.so.* => $p/' && ldd tg | grep -q 'libopenblas.so.* => $p/'"
timeout 120 mpirun --oversubscribe --bind-to none -np 2 ./tg --dp 2 --data text.txt --steps 2 --batch 4 --seq 32 \
  --quiet --threads 1 --log tg.jsonl > run.txt 2>&1
check "it trains at dp=2 under the unpacked mpirun (2 steps logged)" [ "$(grep -c '"loss"' tg.jsonl 2>/dev/null)" = 2 ]
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
