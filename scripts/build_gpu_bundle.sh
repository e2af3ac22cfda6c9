#!/usr/bin/env bash
# Builds build/gpu-bundle/: everything tests/gpu/run_gpu_checks.sh runs, so
# that a GPU machine needs no compiler, no -dev package, no CUDA toolkit and
# no libzmq/yaml-cpp; only glibc, libstdc++/libgcc_s, python3 and, for the GPU
# checks, the NVIDIA driver.
#
#   scripts/build_gpu_bundle.sh        (make gpu-bundle: the same after deps)
#
# Bundle layout (no symbolic links; copy or move the folder anywhere):
#   run_gpu_checks.sh system_libs.sh check_gpu_trace.py torch_activity.py   from tests/gpu
#   bin/  rlscope-ray-aggregator collector_test gpu_activity_test nvtx_app
#         profiler_range gpu_activity (the last two built by nvcc)
#   lib/  librlscope_collector.so, libcupti (the toolkit's; the checks point
#         RLSCOPE_CUPTI_LIBRARY at it) and every shared library the files
#         above need but glibc's, libstdc++'s, libgcc_s' and the driver's
#   BUNDLE_INFO  the commit and toolkit it was built from
# Binaries in bin/ find lib/ through RUNPATH $ORIGIN/../lib, libraries in lib/
# through $ORIGIN; RUNPATH is set on exactly the files that need a bundled
# library. Debug info is stripped; the folder must stay under 64 MiB (what
# the device tool carries).
#
# Idempotent: CMake builds incrementally in its own build directory
# (RLSCOPE_GPU_BUNDLE_BUILD_DIR, default build/gpu-bundle-build) with
# RLSCOPE_BUILD_TESTS=ON RLSCOPE_BUILD_PYTHON=OFF; the bundle is assembled
# beside build/gpu-bundle and swapped in whole. Needs cmake, patchelf, the CUDA
# toolkit (CUPTI headers, libcupti, nvcc from PATH or /usr/local/cuda/bin).
# JOBS (default 2) limits parallel compiles.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SELF=$ROOT/scripts/$(basename "${BASH_SOURCE[0]}")
cd "$ROOT"
BUILD=${RLSCOPE_GPU_BUNDLE_BUILD_DIR:-build/gpu-bundle-build}
BUNDLE=build/gpu-bundle
STAGE=build/gpu-bundle.partial
JOBS=${JOBS:-2}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
MAX_BYTES=$((64 * 1024 * 1024))
# Hopper machine code (the H100/H200 the device tool lends) plus compute_75
# PTX, which the driver compiles for any other GPU CUDA 13 supports.
# shellcheck disable=SC2054  # the commas belong to nvcc's arguments
NVCC_ARCH=(-gencode arch=compute_90,code=sm_90 -gencode arch=compute_75,code=compute_75)

die() { echo "build_gpu_bundle: $*" >&2; exit 1; }
for tool in cmake patchelf strip ldd; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found (apt-get install $tool)"
done
[[ -x $NVCC ]] || die "nvcc not found on PATH or in /usr/local/cuda/bin; set NVCC"

# is_system_lib: what the bundle leaves out (one list, shared with the check).
source tests/gpu/system_libs.sh

mkdir -p "$BUILD"
GEN=()
if [[ ! -f $BUILD/CMakeCache.txt ]] && command -v ninja >/dev/null 2>&1; then GEN=(-G Ninja); fi
echo "build_gpu_bundle: configuring $BUILD" >&2
cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DRLSCOPE_BUILD_TESTS=ON -DRLSCOPE_BUILD_PYTHON=OFF >"$BUILD/cmake.log" 2>&1 ||
  die "cmake configure failed (see $BUILD/cmake.log)"
grep -q "GPU triggers on" "$BUILD/cmake.log" ||
  die "CUPTI headers not found, the collector would have no GPU support (see $BUILD/cmake.log)"
echo "build_gpu_bundle: building (-j$JOBS)" >&2
cmake --build "$BUILD" -j"$JOBS" --target rlscope_collector rlscope-ray-aggregator collector_test \
  gpu_activity_test nvtx_app >"$BUILD/build.log" 2>&1 || die "build failed (see $BUILD/build.log)"

mkdir -p "$BUILD/gpu"
for prog in profiler_range gpu_activity; do
  src=tests/gpu/$prog.cu
  # Rebuilt when the source or this script (the flags) is newer.
  if [[ ! $BUILD/gpu/$prog -nt $src || ! $BUILD/gpu/$prog -nt $SELF ]]; then
    echo "build_gpu_bundle: nvcc $src" >&2
    "$NVCC" -O2 "${NVCC_ARCH[@]}" -o "$BUILD/gpu/$prog" "$src" -ldl >"$BUILD/gpu/$prog.log" 2>&1 ||
      die "nvcc $src failed (see $BUILD/gpu/$prog.log)"
  fi
done

# libcupti: the toolkit's, next to nvcc (the collector dlopen's it at run time).
CUDA_HOME=$(cd "$(dirname "$NVCC")/.." && pwd)
CUPTI=""
for c in "$CUDA_HOME"/extras/CUPTI/lib64/libcupti.so.* "$CUDA_HOME"/lib64/libcupti.so.* \
         "$CUDA_HOME"/lib/libcupti.so.*; do
  if [[ -f $c && $c =~ libcupti\.so\.[0-9]+$ ]]; then CUPTI=$c; break; fi
done
[[ -n $CUPTI ]] || die "libcupti.so.<major> not found under $CUDA_HOME"

rm -rf "$STAGE"
mkdir -p "$STAGE/bin" "$STAGE/lib"
cp "$BUILD/aggregator/rlscope-ray-aggregator" "$BUILD/tests/cpp/collector_test" \
   "$BUILD/tests/cpp/gpu_activity_test" "$BUILD/tests/apps/nvtx_app" \
   "$BUILD/gpu/profiler_range" "$BUILD/gpu/gpu_activity" "$STAGE/bin/"
cp "$BUILD/collector/librlscope_collector.so" "$STAGE/lib/"
strip --strip-debug "$STAGE"/bin/* "$STAGE/lib/librlscope_collector.so"
cp -L "$CUPTI" "$STAGE/lib/"

# The closure of what the files need, as this machine's loader resolves it.
for f in "$STAGE"/bin/* "$STAGE"/lib/*; do
  while read -r name arrow path _; do
    [[ $arrow == "=>" && -f $path ]] || continue
    is_system_lib "$name" && continue
    [[ -e $STAGE/lib/$name ]] || cp -L "$path" "$STAGE/lib/$name"
  done < <(ldd "$f")
done
for f in "$STAGE"/bin/* "$STAGE"/lib/*; do
  needs_bundled=0
  for n in $(patchelf --print-needed "$f"); do
    if [[ -e $STAGE/lib/$n ]]; then needs_bundled=1; fi
  done
  ((needs_bundled)) || continue
  chmod u+w "$f"
  # shellcheck disable=SC2016  # $ORIGIN is the loader's, not the shell's
  if [[ $f == "$STAGE"/bin/* ]]; then
    patchelf --set-rpath '$ORIGIN/../lib' "$f"
  else
    patchelf --set-rpath '$ORIGIN' "$f"
  fi
done

cp tests/gpu/run_gpu_checks.sh tests/gpu/system_libs.sh tests/gpu/check_gpu_trace.py tests/gpu/torch_activity.py \
  "$STAGE/"
{
  echo "commit: $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)"
  echo "cuda: $("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  echo "libcupti: $(basename "$CUPTI")"
} >"$STAGE/BUNDLE_INFO"

# Every file resolves every library it needs, from the bundle unless it is in
# the system set above.
stage_real=$(realpath "$STAGE")
for f in "$STAGE"/bin/* "$STAGE"/lib/*; do
  while read -r name arrow path _; do
    [[ $arrow == "=>" ]] || continue
    [[ $path != "not" ]] || die "$f: $name not found"
    is_system_lib "$name" || [[ $(realpath "$path") == "$stage_real"/* ]] ||
      die "$f: $name resolves to $path, outside the bundle"
  done < <(ldd "$f")
done
bytes=$(du -sb "$STAGE" | cut -f1)
((bytes < MAX_BYTES)) || die "the bundle is $bytes bytes, over the 64 MiB the device tool carries"

rm -rf "$BUNDLE"
mv "$STAGE" "$BUNDLE"
echo "build_gpu_bundle: $BUNDLE ($(du -sh "$BUNDLE" | cut -f1), $(find "$BUNDLE" -type f | wc -l) files)" >&2
