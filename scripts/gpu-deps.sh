#!/bin/bash
# gpu-deps.sh [DIR]: fetches, where apt works, the Debian packages that
# scripts/gpu-check.sh needs on a GPU machine without a package registry:
# Open MPI, OpenBLAS, bison, flex and their libraries (about 21 MB of .deb
# files, into DIR, default .gpu-deps at the repository root; git ignores it).
# Carry DIR to the GPU machine; gpu-check.sh unpacks it into a private
# prefix when mpicc, bison, flex or OpenBLAS are missing there (never into /).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
dir=$(realpath -m "${1:-$src/.gpu-deps}")
mkdir -p "$dir"
cd "$dir"
rm -f ./*.deb
# the tools, their libraries, and the libraries those link that a CUDA image
# need not have (the closure below apt's essential set, as Debian 12 splits it)
pkgs="openmpi-bin openmpi-common libopenmpi3 libopenmpi-dev
  libopenblas0-pthread libopenblas-pthread-dev libopenblas-dev libgfortran5
  bison flex m4 libfl2 libfl-dev
  libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7 libevent-2.1-7 libpmix2 libfabric1 libucx0
  libibverbs1 librdmacm1 libnl-3-200 libnl-route-3-200 libpsm2-2 libpsm-infinipath1 libltdl7 libnuma1 libxnvctrl0
  libmunge2 libudev1 libquadmath0"
apt-get download $pkgs 2>&1 | grep -v "^W: Download is performed unsandboxed" || true
# cuDNN's frontend headers (scripts/setup.sh installs them here): the cuDNN
# attention in a build on the GPU machine
rm -rf cudnn-frontend
if [ -f /opt/cudnn-frontend/include/cudnn_frontend.h ]; then
  mkdir cudnn-frontend && cp -r /opt/cudnn-frontend/include cudnn-frontend/
fi
n=$(ls ./*.deb | wc -l)
echo "gpu-deps: $n packages, $(du -sh . | cut -f1), in $dir"
