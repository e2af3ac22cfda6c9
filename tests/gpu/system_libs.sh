# Sourced by scripts/build_gpu_bundle.sh and run_gpu_checks.sh (a copy sits in
# the bundle): the shared libraries every target machine has, so the bundle
# leaves them out and its check accepts them from the system: glibc's own,
# the C++ runtime, the vDSO and the NVIDIA driver's. Every other library a
# bundled file needs comes from the bundle.
is_system_lib() {
  case $1 in
    linux-vdso.so.* | ld-linux*.so.* | libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | \
    librt.so.* | libutil.so.* | libresolv.so.* | libanl.so.* | libmvec.so.* | \
    libstdc++.so.* | libgcc_s.so.* | libcuda.so.* | libnvidia-*.so.*) return 0 ;;
  esac
  return 1
}
