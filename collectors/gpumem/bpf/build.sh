#!/bin/sh
# Rebuild cuda_mem.bpf.o from cuda_mem.bpf.c (Debian: clang, llvm, libbpf-dev, linux-libc-dev).
# No kernel headers and no vmlinux.h: the program reads only user memory. The object is shipped in
# the wheel as package data; a test rebuilds it here and loads the result (tests/integration/test_gpumem.py).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/cuda_mem.bpf.o}
arch_inc=/usr/include/$(uname -m)-linux-gnu
clang -target bpf -D__TARGET_ARCH_x86 -O2 -g -I"$arch_inc" -c "$here/cuda_mem.bpf.c" -o "$out.tmp"
llvm-strip -g "$out.tmp"  # DWARF out; the BTF that libbpf needs for the maps stays
mv "$out.tmp" "$out"
