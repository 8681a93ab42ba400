#!/usr/bin/env bash
# All tests: set everything up, then the C++ unit tests (ctest) and the Python suite (pytest).
set -euo pipefail
root=$(cd "$(dirname "$0")" && pwd)
"$root/scripts/setup.sh"
cd "$root"
echo "== C++ tests (pjrt, hlo) =="
ctest --test-dir build --output-on-failure
echo "== Python tests =="
# Run from outside the source tree so the installed package is what gets tested. Two workers, a file
# each at a time (most time goes to single-threaded plugin compiles); TORCH_PJRT_TEST_WORKERS=0 runs serially.
cd tests/python
# A test that hangs fails after 20 minutes with every thread's stack printed, instead of eating the CI budget.
set -- --timeout "${TORCH_PJRT_TEST_TIMEOUT:-1200}" "$@"
workers=${TORCH_PJRT_TEST_WORKERS:-2}
if [ "$workers" -gt 0 ]; then set -- -n "$workers" --dist loadfile "$@"; fi
exec ../../.venv/bin/python -m pytest -q -p no:cacheprovider "$@" .
