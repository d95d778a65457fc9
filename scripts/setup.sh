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
)

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all system packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
