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

# Hugging Face transformers for Debian's python (a test loads our GPT-2
# checkpoints into GPT2LMHeadModel); the version that works with torch 1.13.
# Optional: without it that one test says it was skipped.
if ! /usr/bin/python3 -c "import transformers" 2>/dev/null; then
  echo "setup: installing transformers 4.30.2 for /usr/bin/python3"
  $SUDO /usr/bin/python3 -m pip install -q --break-system-packages "transformers==4.30.2" ||
    echo "setup: warning: transformers could not be installed; the Hugging Face loading test will be skipped"
fi
