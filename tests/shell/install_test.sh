#!/usr/bin/env bash
# Installs kolo into a temporary prefix and builds examples/c_allreduce.c
# against it twice, with pkg-config and with find_package(kolo), using only
# what was installed; then runs both under the installed kolorun.
#
#   install_test.sh SOURCE_DIR BUILD_DIR [SANITIZERS]
set -euo pipefail

src=$1
build=$2
sanitize=${3:-}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/kolo_install_test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

echo "== cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" ||
  { cat "$tmp/install.log"; fail "cmake --install"; }

libdir=$(dirname "$(find "$prefix" -name 'libkolo.so' -print -quit)")
[[ -n "$libdir" && -e "$libdir/libkolo.so" ]] || fail "libkolo.so not installed"
for f in include/kolo/kolo.h include/kolo/communicator.h include/kolo/error.h \
  include/kolo/types.h include/kolo/cuda.h include/kolo/cuda_communicator.h bin/kolorun; do
  [[ -e "$prefix/$f" ]] || fail "$f not installed"
done
[[ -e "$libdir/pkgconfig/kolo.pc" ]] || fail "kolo.pc not installed"
[[ -e "$libdir/cmake/kolo/kolo-config.cmake" ]] || fail "kolo-config.cmake not installed"
# No internal header leaks into the public include directory.
extra=$(find "$prefix/include" -type f ! -path "$prefix/include/kolo/*.h")
[[ -z "$extra" ]] || fail "unexpected installed headers: $extra"

# An ASan/UBSan libkolo needs the program built with the same runtime.
san_flags=()
if [[ -n "$sanitize" ]]; then
  san_flags=("-fsanitize=$sanitize")
fi

echo "== pkg-config"
export PKG_CONFIG_PATH="$libdir/pkgconfig"
pc_flags=$(pkg-config --cflags --libs kolo) || fail "pkg-config --cflags --libs kolo"
echo "pkg-config --cflags --libs kolo: $pc_flags"
[[ "$(pkg-config --modversion kolo)" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "kolo.pc version"
# shellcheck disable=SC2086
cc -std=c11 -Wall -Wextra -Werror "${san_flags[@]}" "$src/examples/c_allreduce.c" \
  $pc_flags -Wl,-rpath,"$libdir" -o "$tmp/c_allreduce_pc" || fail "build with pkg-config"

# kolo/cuda.h is C (no CUDA header needed) and answers without kolo_init.
cat >"$tmp/cuda_query.c" <<'C'
#include <kolo/cuda.h>
#include <stdio.h>
int main(void) {
  int count = -1;
  const char* reason = NULL;
  if (kolo_cuda_device_count(&count, &reason) != KOLO_OK) return 1;
  printf("cuda_built %d, nccl_built %d, devices %d (%s)\n", kolo_cuda_built(),
         kolo_nccl_built(), count, reason);
  return (kolo_cuda_built() == 0 || kolo_cuda_built() == 1) && count >= 0 ? 0 : 1;
}
C
# shellcheck disable=SC2086
cc -std=c11 -Wall -Wextra -Werror "${san_flags[@]}" "$tmp/cuda_query.c" \
  $pc_flags -Wl,-rpath,"$libdir" -o "$tmp/cuda_query" || fail "build kolo/cuda.h from C"
"$tmp/cuda_query" || fail "kolo/cuda.h queries from C"

echo "== find_package(kolo)"
mkdir -p "$tmp/proj"
cat >"$tmp/proj/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.20)
project(use_kolo C)
find_package(kolo 0.1 REQUIRED)
add_executable(c_allreduce_cmake "$src/examples/c_allreduce.c")
target_link_libraries(c_allreduce_cmake PRIVATE kolo::kolo)
CMAKE
cmake -S "$tmp/proj" -B "$tmp/proj/build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_FLAGS="${san_flags[*]}" -DCMAKE_EXE_LINKER_FLAGS="${san_flags[*]}" \
  >"$tmp/cmake.log" 2>&1 || { cat "$tmp/cmake.log"; fail "configure with find_package(kolo)"; }
cmake --build "$tmp/proj/build" >"$tmp/build.log" 2>&1 ||
  { cat "$tmp/build.log"; fail "build with find_package(kolo)"; }

echo "== run under the installed kolorun"
for exe in "$tmp/c_allreduce_pc" "$tmp/proj/build/c_allreduce_cmake"; do
  for np in 1 2 3; do
    out=$(timeout 120 "$prefix/bin/kolorun" -np "$np" "$exe" 2>&1) ||
      { echo "$out"; fail "$(basename "$exe") under kolorun -np $np"; }
    ok=$(grep -c "allreduce of 10 floats ok" <<<"$out" || true)
    [[ "$ok" == "$np" ]] || { echo "$out"; fail "$np ranks should report ok, $ok did"; }
  done
  echo "$out"
done
