#!/usr/bin/env bash
# install_consumer.sh: installs the build into a temporary prefix and builds examples/c_api.c as
# another project would, once with find_package(sparsejit) and once with pkg-config.
set -eu
build=$(cd "$1" && pwd) src=$(cd "$2" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
# libcuda is dlopen'ed: the library must not need it at load time, on a machine with no driver
if readelf -d "$tmp"/prefix/lib/libsparsejit.so | grep -q "libcuda"; then
  echo "FAIL: libsparsejit.so has a load-time dependency on libcuda"; exit 1
fi
mkdir -p "$tmp/app"
cat >"$tmp/app/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.20)
project(consumer C)
find_package(sparsejit 0.1 REQUIRED)
add_executable(consumer $src/examples/c_api.c)
target_link_libraries(consumer PRIVATE sparsejit::sparsejit m)
CM
cmake -S "$tmp/app" -B "$tmp/app/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/app/build" >/dev/null
# the program runs: exit 0 with a GPU, or a clear "no GPU" message without one
out=$(LD_LIBRARY_PATH="$tmp/prefix/lib" "$tmp/app/build/consumer" 2>&1) || echo "$out" | grep -q "no GPU" ||
  { echo "FAIL: consumer: $out"; exit 1; }
pc="$tmp/prefix/lib/pkgconfig/sparsejit.pc"
[ -f "$pc" ] || { echo "FAIL: no $pc"; exit 1; }
# pkg-config for real, after moving the installed tree: its paths are relative to the .pc file
mv "$tmp/prefix" "$tmp/moved"
pc="$tmp/moved/lib/pkgconfig/sparsejit.pc"
flags=$(PKG_CONFIG_PATH="$tmp/moved/lib/pkgconfig" pkg-config --cflags --libs sparsejit) ||
  { echo "FAIL: pkg-config cannot read $pc"; exit 1; }
case "$flags" in *"$tmp/moved/"*) ;; *) echo "FAIL: pkg-config flags '$flags' do not point into the moved tree"; exit 1 ;; esac
cc -o "$tmp/consumer_pc" "$src/examples/c_api.c" $flags -lm
out=$(LD_LIBRARY_PATH="$tmp/moved/lib" "$tmp/consumer_pc" 2>&1) || echo "$out" | grep -q "no GPU" ||
  { echo "FAIL: consumer built with pkg-config: $out"; exit 1; }
mv "$tmp/moved" "$tmp/prefix"
pc="$tmp/prefix/lib/pkgconfig/sparsejit.pc"
# one version number: the installed header, the library and the pkg-config file agree
cat >"$tmp/version.c" <<'C'
#include <stdio.h>
#include <string.h>
#include <sparsejit.h>
int main(void) { puts(sj_version_string()); return strcmp(sj_version_string(), SJ_VERSION_STRING) != 0; }
C
cc -o "$tmp/version" "$tmp/version.c" -I"$tmp/prefix/include" -L"$tmp/prefix/lib" -lsparsejit
lib_version=$(LD_LIBRARY_PATH="$tmp/prefix/lib" "$tmp/version") ||
  { echo "FAIL: sj_version_string() $lib_version differs from the installed SJ_VERSION_STRING"; exit 1; }
pc_version=$(sed -n 's/^Version: //p' "$pc")
[ "$lib_version" = "$pc_version" ] ||
  { echo "FAIL: the library says version $lib_version, sparsejit.pc says $pc_version"; exit 1; }
echo "install consumer: ok"
