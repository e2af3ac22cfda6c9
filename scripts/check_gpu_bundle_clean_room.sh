#!/usr/bin/env bash
# Proves that build/gpu-bundle (scripts/build_gpu_bundle.sh) runs on a clean
# x86-64 Debian 12 with no compiler, no -dev package, no CUDA toolkit and no
# libzmq/yaml-cpp: a minbase bookworm root made by debootstrap (plus python3),
# the bundle copied into it at another path, and its run_gpu_checks.sh run
# there under chroot. Passes (exit 0) only when every check that needs no GPU
# PASSes and every GPU check SKIPs; prints the checks' lines as they ran.
#
#   scripts/check_gpu_bundle_clean_room.sh
#
# Needs root (debootstrap, mount, chroot) and a reachable Debian mirror the
# first time. The root filesystem is made once and reused:
#   RLSCOPE_CLEAN_ROOT  where it lives (default /tmp/rlscope-clean-bookworm)
#   DEBIAN_MIRROR       where debootstrap fetches from (default deb.debian.org)
# Not part of the test suites.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUNDLE=$ROOT/build/gpu-bundle
CLEAN=${RLSCOPE_CLEAN_ROOT:-/tmp/rlscope-clean-bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# Inside the root: the bundle at a path unlike the one it was built at.
INNER_BUNDLE=/opt/relocated/gpu-bundle
INNER_WORK=/tmp/gpu-checks

[[ $(id -u) -eq 0 ]] || { echo "clean room: needs root (debootstrap, mount, chroot)" >&2; exit 2; }
[[ -x $BUNDLE/run_gpu_checks.sh ]] ||
  { echo "clean room: $BUNDLE is missing; run 'make gpu-bundle' first" >&2; exit 2; }

# The root is complete only once the marker exists; a half-made one is redone.
if [[ ! -f $CLEAN/.rlscope-clean-root ]]; then
  if ! command -v debootstrap >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap
  fi
  rm -rf "$CLEAN"
  echo "clean room: debootstrap bookworm (minbase + python3) into $CLEAN" >&2
  debootstrap --variant=minbase --include=python3 bookworm "$CLEAN" "$MIRROR" >"$CLEAN.debootstrap.log" 2>&1 ||
    { echo "clean room: debootstrap failed (see $CLEAN.debootstrap.log)" >&2; exit 1; }
  touch "$CLEAN/.rlscope-clean-root"
fi

cleanup() {
  for m in dev proc; do
    if mountpoint -q "$CLEAN/$m"; then umount -l "$CLEAN/$m" || true; fi
  done
}
trap cleanup EXIT
mountpoint -q "$CLEAN/proc" || mount -t proc proc "$CLEAN/proc"
mountpoint -q "$CLEAN/dev" || mount --bind /dev "$CLEAN/dev"

# What "clean" means, checked rather than assumed.
# shellcheck disable=SC2016  # ${Package} is dpkg-query's
dirty=$(chroot "$CLEAN" dpkg-query -W -f='${Package}\n' |
          grep -E -- '-dev$|^libzmq|^libyaml-cpp|^libsodium|^libpgm|^libnorm|^libgtest|^cuda|^nvidia|^libcupti|^gcc(-[0-9]+)?$|^g\+\+|^cpp(-[0-9]+)?$|^clang|^cmake|^patchelf|^binutils' || true)
[[ -z $dirty ]] || { echo "clean room: $CLEAN is not clean, it has: $(tr '\n' ' ' <<<"$dirty")" >&2; exit 1; }
if chroot "$CLEAN" /bin/sh -c 'command -v cc || command -v gcc || command -v nvcc || command -v nvidia-smi' >/dev/null; then
  echo "clean room: $CLEAN has a compiler or nvidia-smi" >&2; exit 1
fi

rm -rf "${CLEAN:?}$INNER_BUNDLE" "${CLEAN:?}$INNER_WORK"
mkdir -p "$(dirname "$CLEAN$INNER_BUNDLE")"
cp -a "$BUNDLE" "$CLEAN$INNER_BUNDLE"

rc=0
out=$(chroot "$CLEAN" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
        "$INNER_BUNDLE/run_gpu_checks.sh" --work "$INNER_WORK" 2>&1) || rc=$?
printf '%s\n' "$out"

problems=()
((rc == 0)) || problems+=("run_gpu_checks.sh exited $rc")
grep -q '^FAIL:' <<<"$out" && problems+=("a check FAILed")
for check in "bundled files resolve" "aggregator starts" "CPU-only NVTX program" "gpu_activity_test conversion"; do
  grep -q "^PASS: $check" <<<"$out" || problems+=("no PASS for '$check'")
done
skips=$(grep -c '^SKIP:' <<<"$out" || true)
((skips == 7)) || problems+=("$skips SKIP lines, want 7 (one per GPU check)")
if ((${#problems[@]} > 0)); then
  echo "clean room: FAILED: $(IFS=';'; echo "${problems[*]}") (logs in $CLEAN$INNER_WORK)"
  exit 1
fi
echo "clean room: OK (Debian 12 minbase at $CLEAN; logs in $CLEAN$INNER_WORK)"
