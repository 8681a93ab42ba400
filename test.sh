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
../../.venv/bin/python -m pytest -q -p no:cacheprovider "$@" .

echo "== Python tests under fused eager (TORCH_PJRT_EAGER=fused) =="
# The same suite with ops recorded into streams, each stream run as one program. A process per test file:
# fused eager compiles a program per op and one per stream, and one process of the whole suite would pass
# the kernel's limit on memory mappings (vm.max_map_count; README, "Known differences").
logs=$(mktemp -d)
ls test_*.py | TORCH_PJRT_EAGER=fused xargs -P "$(( workers > 0 ? workers : 1 ))" -I{} sh -c \
  '../../.venv/bin/python -m pytest -q -p no:cacheprovider -p no:xdist --timeout "${TORCH_PJRT_TEST_TIMEOUT:-1200}" "$1" \
     > "$2/$1.log" 2>&1 || echo "$1" >> "$2/failed"' _ {} "$logs"
for f in "$logs"/*.log; do tail -n 1 "$f" | sed "s|^|$(basename "$f" .log): |"; done
if [ -s "$logs/failed" ]; then
  for f in $(cat "$logs/failed"); do echo "== $f (fused eager) =="; cat "$logs/$f.log"; done
  echo "fused eager: failures in $(wc -l < "$logs/failed") file(s)"
  exit 1
fi
