#!/usr/bin/env bash
# Installs what the AArch64 cross-build stage of scripts/test.sh needs on a Debian 12 (bookworm)
# x86-64 machine: the cross compiler, Highway and GoogleTest for arm64 (multiarch) and qemu-user
# to run the CLI and tests.
# The header-only dependencies come from the host packages scripts/install_deps.sh installs.
set -euo pipefail

packages=(
  g++-aarch64-linux-gnu=4:12.*   # the cross compiler (g++ 12, as the native build)
  libhwy-dev:arm64=1.0.3-*       # Highway for the target
  libgtest-dev:arm64=1.12.*      # the unit tests, which the stage runs
  qemu-user=1:7.2*               # runs the cross-built CLI on the golden cases, and the tests
)
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "${p%%=*}" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install_cross_deps: apt-get install ${missing[*]}" >&2
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    $sudo dpkg --add-architecture arm64
  fi
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
