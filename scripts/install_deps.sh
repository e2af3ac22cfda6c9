#!/usr/bin/env bash
# Installs the Debian packages the build needs, only those missing. Idempotent.
# Needs root (or sudo). The CUDA toolkit (NVTX3 headers, later CUPTI) is
# expected in its standard place; it is not a Debian package here.
set -euo pipefail
# chromium + fonts-dejavu-core: headless rendering of the HTML report in tests/test_report.py.
# patchelf: RUNPATHs in the GPU check bundle (scripts/build_gpu_bundle.sh).
packages=(build-essential cmake ninja-build pkg-config libzmq3-dev cppzmq-dev
          libmsgpack-cxx-dev libyaml-cpp-dev libgtest-dev chromium fonts-dejavu-core patchelf)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install_deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if [ ! -f /usr/local/cuda/include/nvtx3/nvToolsExt.h ] && ! command -v nvcc >/dev/null 2>&1; then
  echo "install_deps: warning: CUDA toolkit not found (NVTX3 headers); pass" \
       "-DRLSCOPE_NVTX3_INCLUDE_DIR=<dir with nvtx3/> through CMAKE_ARGS" >&2
fi
