#!/usr/bin/env bash
# Sets up a fresh Debian/Ubuntu machine (packages), builds everything and runs
# the whole test suite through ctest. Usage: scripts/test.sh [ctest args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
build=${SHARDC_BUILD:-build}
werror=OFF
[ -n "${CI:-}" ] && werror=ON
cmake -S . -B "$build" -DSHARDC_WERROR=$werror >/dev/null
cmake --build "$build" -j"$(nproc)"
cd "$build"
# as many tests at once as there are cores (-j N or CTEST_PARALLEL_LEVEL overrides); the
# tests that keep every core busy say so and run alone (the end of tests/tests.cmake)
export CTEST_PARALLEL_LEVEL=${CTEST_PARALLEL_LEVEL:-$(getconf _NPROCESSORS_ONLN)}
ctest --output-on-failure "$@"
