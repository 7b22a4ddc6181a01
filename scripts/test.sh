#!/usr/bin/env bash
# All tests on a fresh machine: install dependencies; a Release build with -Werror running every
# test (unit, determinism, statistical, golden through check.py, CLI errors, packaging); then an
# ASan+UBSan build running the unit, determinism and CLI error tests.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
python="$(command -v python3)"

echo "== Release build (-Werror) and all tests" >&2
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DLASTMILE_WERROR=ON -DPython3_EXECUTABLE="$python" >/dev/null
cmake --build build -j2
ctest --test-dir build --output-on-failure -j2

echo "== ASan+UBSan build: unit, determinism and CLI error tests" >&2
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLASTMILE_WERROR=ON \
  -DLASTMILE_SANITIZE=address,undefined -DPython3_EXECUTABLE="$python" >/dev/null
cmake --build build-asan -j2 --target lastmile_unit_tests lastmile_determinism_tests lastmile_cli \
  example_stateless example_stateful
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j2 -L "unit|determinism|cli"
