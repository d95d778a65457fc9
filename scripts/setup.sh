#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages shardc needs, idempotently: only what is
# missing is installed, and a machine that has everything runs no apt at all.
set -euo pipefail

pkgs=(
  build-essential cmake pkg-config
  flex bison
  openmpi-bin libopenmpi-dev
  libopenblas-dev
  clang llvm libclang-rt-14-dev      # libFuzzer + sanitizers for the front end
  python3 python3-numpy python3-torch  # PyTorch reference tests (Debian's torch)
  fortunes-min fortunes               # offline English text for the demo
  slurm-wlm munge                     # a one-node Slurm cluster in a test (srun --mpi=pmix)
)

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all system packages present"
else
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Hugging Face transformers for Debian's python (tests load our GPT-2 and
# Llama checkpoints into transformers and theirs into ours); 4.44.2 works
# with Debian's torch 1.13 and has Llama 3.1's rope_scaling (4.43 and later).
# Optional: without it those checks say they were skipped.
hf_version=4.44.2
if [ "$(/usr/bin/python3 -c "import transformers; print(transformers.__version__)" 2>/dev/null)" != "$hf_version" ]; then
  echo "setup: installing transformers $hf_version for /usr/bin/python3"
  $SUDO /usr/bin/python3 -m pip install -q --break-system-packages "transformers==$hf_version" ||
    echo "setup: warning: transformers $hf_version could not be installed; Hugging Face checks will be skipped"
fi

# cuDNN's frontend (header-only C++; NVIDIA's, MIT-licensed) for the CUDA
# backend's cuDNN attention (SHARDC_CUDA_ATTN=cudnn), where nvcc is: its
# headers, from the wheel on the Python package index, into
# /opt/cudnn-frontend/include, where CMake looks. Optional: without them that
# path is not built (CMake says so) and everything else is.
fe_version=1.32.0
fe_dir=/opt/cudnn-frontend
if { command -v nvcc || [ -x /usr/local/cuda/bin/nvcc ]; } > /dev/null &&
   [ "$(cat "$fe_dir/VERSION" 2>/dev/null)" != "$fe_version" ]; then
  echo "setup: installing cuDNN frontend $fe_version headers into $fe_dir"
  fe_tmp=$(mktemp -d)
  if /usr/bin/python3 -m pip download -q --no-deps --only-binary=:all: -d "$fe_tmp" "nvidia-cudnn-frontend==$fe_version" &&
     $SUDO /usr/bin/python3 - "$fe_tmp" "$fe_dir" "$fe_version" <<'PY'
import glob, os, shutil, sys, zipfile
tmp, dest, version = sys.argv[1:4]
whl = zipfile.ZipFile(glob.glob(os.path.join(tmp, "*.whl"))[0])
stage = os.path.join(tmp, "x")
whl.extractall(stage, [n for n in whl.namelist() if n.startswith("include/")])
shutil.rmtree(dest, ignore_errors=True)
os.makedirs(dest)
shutil.move(os.path.join(stage, "include"), os.path.join(dest, "include"))
open(os.path.join(dest, "VERSION"), "w").write(version + "\n")
PY
  then :; else
    echo "setup: warning: the cuDNN frontend headers could not be installed; the cuDNN attention will not be built"
  fi
  rm -rf "$fe_tmp"
fi
