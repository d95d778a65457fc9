# gpu-deps-env.sh: sourced by scripts/gpu-check.sh (and tests/gpu_deps.sh).
# gpu_deps_env DEBDIR PREFIX: unpacks the .deb files of DEBDIR (made by
# scripts/gpu-deps.sh) into PREFIX, never into /, and points the shell at
# them: PATH, the library and include paths, Open MPI (OPAL_PREFIX: its paths
# follow the prefix) and bison. Sets the array GPU_DEPS_CMAKE to the CMake
# options that name the unpacked tools. Returns non-zero (with a message on
# stderr) when DEBDIR has no .deb files or the unpacked mpicc or bison fail.
gpu_deps_env() {
  local deps=$1 p=$2 f lib
  if ! ls "$deps"/*.deb > /dev/null 2>&1; then
    echo "no .deb files in $deps (run scripts/gpu-deps.sh where apt works, and carry the directory)" >&2
    return 1
  fi
  for f in "$deps"/*.deb; do dpkg -x "$f" "$p" || return 1; done
  # Debian names them mpicc.openmpi etc. and links mpicc through
  # update-alternatives, which unpacking does not run
  for f in "$p"/usr/bin/*.openmpi; do ln -sf "$(basename "$f")" "${f%.openmpi}"; done
  lib=$p/usr/lib/x86_64-linux-gnu
  export PATH=$p/usr/bin:$PATH
  export LD_LIBRARY_PATH=$lib/openblas-pthread:$lib/openmpi/lib:$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export LIBRARY_PATH=$lib/openblas-pthread:$lib/openmpi/lib:$lib${LIBRARY_PATH:+:$LIBRARY_PATH}
  export CPATH=$p/usr/include/x86_64-linux-gnu/openblas-pthread:$lib/openmpi/include${CPATH:+:$CPATH}
  export OPAL_PREFIX=$p/usr
  export BISON_PKGDATADIR=$p/usr/share/bison M4=$p/usr/bin/m4
  GPU_DEPS_CMAKE=(-DMPI_C_COMPILER="$p/usr/bin/mpicc" -DMPIEXEC_EXECUTABLE="$p/usr/bin/mpiexec"
    -DOPENBLAS_LIB="$lib/openblas-pthread/libopenblas.so" -DBISON_EXECUTABLE="$p/usr/bin/bison"
    -DFLEX_EXECUTABLE="$p/usr/bin/flex")
  if ! mpicc --version > /dev/null 2>&1 || ! bison --version > /dev/null 2>&1; then
    echo "the unpacked mpicc or bison does not run" >&2
    return 1
  fi
}
