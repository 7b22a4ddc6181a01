# Cross-building lastmile for AArch64 Linux on a Debian x86-64 host:
#   dpkg --add-architecture arm64 && apt-get update
#   apt-get install g++-aarch64-linux-gnu libhwy-dev:arm64 libgtest-dev:arm64 qemu-user
#   (or scripts/install_cross_deps.sh)
#   cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake
# The header-only dependencies (Random123, nlohmann/json, CLI11) come from the host's /usr/include.
# Test binaries run under qemu-user (CMAKE_CROSSCOMPILING_EMULATOR), without -L: the guest's loader
# and libc then both come from libc6:arm64 (multiarch); -L /usr/aarch64-linux-gnu mixed the cross
# toolchain's loader with that libc, and a guest's threads never started.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /usr/lib/aarch64-linux-gnu /usr)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
