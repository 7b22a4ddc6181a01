#!/usr/bin/env bash
# All tests on a fresh machine: install dependencies; a Release build with -Werror (the
# micro-benchmarks compiled too, not run) running every test (unit, determinism, statistical,
# golden through check.py, CLI errors, packaging, the C API test); `pip install .` and the pytest
# suite (numpy, torch, the vLLM adapter, golden through the Python runner); a TSan build running
# the threaded tests; one clang ASan+UBSan build running the unit, determinism and CLI error tests
# and libFuzzer over the input readers and the C API; an AArch64 cross-build whose CLI runs the
# golden cases, and its unit tests, C API test and examples, under qemu-user; clang-format.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each stage's start, with the seconds since this script began: CI must stay under 30 minutes.
stage() { echo "== [${SECONDS} s] $*" >&2; }
scripts/install_deps.sh
python="$(command -v python3)"

stage "clang-format (Google base, 100 columns)"
git ls-files '*.cpp' '*.hpp' '*.h' '*.c' | xargs clang-format --dry-run --Werror

stage "Release build (-Werror) and all tests"
# Tests and tools named: scripts/demo.sh configures the same build/ without tests, and a cached
# OFF would leave ctest nothing to run (--no-tests=error makes that a failure, not a pass).
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DLASTMILE_WERROR=ON -DLASTMILE_BUILD_BENCHMARKS=ON \
  -DLASTMILE_BUILD_TESTS=ON -DLASTMILE_BUILD_TOOLS=ON -DPython3_EXECUTABLE="$python" >/dev/null
cmake --build build -j2
ctest --test-dir build --output-on-failure --no-tests=error -j2

stage "Python: pip install . (nanobind + scikit-build-core), then pytest tests/python"
python3 -m pip install -q .
(cd "$(mktemp -d)" && python3 -m pytest -q -p no:cacheprovider "$OLDPWD/tests/python")

stage "TSan build: determinism and threaded unit tests (threads 1-3 on shared samplers)"
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLASTMILE_WERROR=ON \
  -DLASTMILE_SANITIZE=thread -DLASTMILE_BUILD_TESTS=ON -DLASTMILE_BUILD_TOOLS=OFF \
  -DPython3_EXECUTABLE="$python" >/dev/null
cmake --build build-tsan -j2 --target lastmile_threaded_tests lastmile_determinism_tests
TSAN_OPTIONS=halt_on_error=1 build-tsan/tests/lastmile_determinism_tests --gtest_brief=1
TSAN_OPTIONS=halt_on_error=1 build-tsan/tests/lastmile_threaded_tests --gtest_brief=1

stage "ASan+UBSan build (clang, the fuzzers too): unit (C API; AVX2 and SSE4 too), determinism, CLI"
cmake -S . -B build-asan -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang -DLASTMILE_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLASTMILE_WERROR=ON -DLASTMILE_SANITIZE=address,undefined \
  -DLASTMILE_BUILD_TESTS=ON -DLASTMILE_BUILD_TOOLS=ON -DPython3_EXECUTABLE="$python" >/dev/null
cmake --build build-asan -j2 --target lastmile_unit_tests lastmile_determinism_tests lastmile_cli \
  example_stateless example_stateful example_c_api capi_test case_reader_fuzz npy_reader_fuzz capi_fuzz
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure --no-tests=error -j2 -L "unit|determinism|cli"

stage "libFuzzer (the ASan+UBSan build): the case.json and .npy readers and the C API, 30 s each"
for target in case_reader npy_reader capi; do
  corpus="build-asan/corpus-${target}"
  mkdir -p "$corpus"
  if ! "build-asan/${target}_fuzz" -max_total_time=30 -max_len=4096 -seed=1 "$corpus" \
    "tests/fuzz/corpus/${target%_reader}" >"build-asan/${target}.log" 2>&1; then
    grep -v '^#[0-9]' "build-asan/${target}.log" | tail -n 40 >&2  # the finding and its input
    exit 1
  fi
  tail -n 1 "build-asan/${target}.log"
done
stage "AArch64 cross-build (NEON, -Werror): golden cases, unit and C API tests, examples, qemu-user"
scripts/install_cross_deps.sh
cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake \
  -DCMAKE_BUILD_TYPE=Release -DLASTMILE_WERROR=ON -DLASTMILE_BUILD_TESTS=ON \
  -DLASTMILE_BUILD_TOOLS=ON -DPython3_EXECUTABLE="$python" >/dev/null
cmake --build build-arm64 -j2 --target lastmile_cli lastmile_unit_tests capi_test \
  example_stateless example_stateful example_c_api
# Every check of every case; the frequency test takes 400 draws per random row, not 2000 as on
# x86-64: under qemu-user the 2000 took 180 s of the whole check's 188, and 400 take 40 of 48.
"$python" ../shared/golden/check.py --repeat 400 --runner \
  "qemu-aarch64 $PWD/build-arm64/lastmile run {case} --out {out}" ../shared/golden/cases | tail -n 1
# The NEON kernels against the oracle, test by test (the toolchain's emulator): some 3.5 minutes.
# The determinism and statistical tests took 4 and over 10 more; they stay on x86-64.
ctest --test-dir build-arm64 --output-on-failure --no-tests=error -j2 -L unit
stage "all passed"
