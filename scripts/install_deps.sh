#!/usr/bin/env bash
# Installs what lastmile needs on a fresh Debian 12 (bookworm) machine: the compiler and CMake,
# the C++ libraries (Debian packages, upstream versions pinned) and the Python packages (PyPI,
# pinned) for the golden checker, the Python package build and its tests.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  cmake=3.25.*            # build
  g++=4:12.*              # C++20 compiler
  make=4.3*
  python3                 # runs the golden checker and the CLI error tests
  libhwy-dev=1.0.3-*      # Highway: SIMD kernels with runtime dispatch
  librandom123-dev=1.14.* # Philox-4x32-10, the counter-based random stream
  nlohmann-json3-dev=3.11.* # case.json / output.json in the CLI and tests
  libcli11-dev=2.1.*      # CLI parsing
  libgtest-dev=1.12.*     # unit, determinism and statistical tests
  libbenchmark-dev=1.7.*  # bench/micro: per-kernel micro-benchmarks (built by CI, not run)
  clang=1:14.*            # the ASan+UBSan build and its libFuzzer harnesses
  clang-format=1:14.*     # the layout check
  libclang-rt-14-dev=1:14.*
)
names=()
for p in "${packages[@]}"; do names+=("${p%%=*}"); done
# Installed for this machine's architecture (or all): with arm64 added for the cross-build stage,
# an unqualified query also matches libhwy-dev:arm64 alone.
native="$(dpkg --print-architecture)"
installed() {
  dpkg-query -W -f='${Status} ${Architecture}\n' "$1" 2>/dev/null |
    grep -Eq "^install ok installed (${native}|all)$"
}
missing=()
for i in "${!names[@]}"; do
  installed "${names[$i]}" || missing+=("${packages[$i]}")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "install_deps: apt-get install ${missing[*]}" >&2
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Python side (PyPI, pinned): numpy for the golden checker; pytest and torch for the Python tests
# (torch inputs, the vLLM adapter); ml_dtypes for the test of numpy bfloat16 arrays. `pip install .`
# fetches its pinned build tools itself (pyproject.toml: scikit-build-core, nanobind).
python_packages=("numpy==2.1.3" "pytest==8.3.4" "torch==2.9.1"
                 "ml_dtypes==0.5.1")
missing=()
for p in "${python_packages[@]}"; do
  python3 -c "import importlib.metadata as m, sys; sys.exit(m.version('${p%%==*}') != '${p#*==}')" \
    2>/dev/null || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install_deps: pip install ${missing[*]}" >&2
  python3 -m pip install -q "${missing[@]}"
fi
