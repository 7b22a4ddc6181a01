#!/usr/bin/env bash
# The main job on a fresh machine: install dependencies, build, run the `lastmile` demo.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DLASTMILE_BUILD_TESTS=OFF >/dev/null
cmake --build build -j2 --target lastmile_cli >/dev/null
build/lastmile "$@"
