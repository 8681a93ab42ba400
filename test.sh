#!/usr/bin/env bash
# All tests: set everything up, then the C++ unit tests (ctest) and the Python suite (pytest).
set -euo pipefail
root=$(cd "$(dirname "$0")" && pwd)
"$root/scripts/setup.sh"
cd "$root"
echo "== C++ tests (pjrt, hlo) =="
ctest --test-dir build --output-on-failure
echo "== The wheel: built for this torch, installed in a clean venv with only CPU torch and [cpu], smoke-tested =="
# scripts/build-wheel.sh --here packs the extension just built (build/) into a manylinux wheel in dist/.
"$root/scripts/build-wheel.sh" --here
wheel=$(ls "$root"/dist/torch_pjrt-*.whl)
clean=$(mktemp -d)
python3 -m venv "$clean/venv"
torch_version=$("$root/.venv/bin/python" -c "import torch; print(torch.__version__.split('+')[0])")
"$clean/venv/bin/python" -m pip install -q --disable-pip-version-check "torch==$torch_version" "$wheel[cpu]"
(cd "$clean" && TORCH_PJRT_CPU_THREADS=1 "$clean/venv/bin/python" "$root/tests/wheel/smoke.py")
rm -rf "$clean"

echo "== Python tests =="
# Run from outside the source tree so the installed package is what gets tested. Two workers, a file
# each at a time (most time goes to single-threaded plugin compiles); TORCH_PJRT_TEST_WORKERS=0 runs serially.
cd tests/python
# A test that hangs fails after 20 minutes with every thread's stack printed, instead of eating the CI budget.
set -- --timeout "${TORCH_PJRT_TEST_TIMEOUT:-1200}" "$@"
workers=${TORCH_PJRT_TEST_WORKERS:-2}
if [ "$workers" -gt 0 ]; then set -- -n "$workers" --dist loadfile "$@"; fi
# --durations: the slowest tests, for keeping the run inside CI's budget.
../../.venv/bin/python -m pytest -q -p no:cacheprovider --durations=20 "$@" .

echo "== Python tests under fused eager (TORCH_PJRT_EAGER=fused) =="
# The same suite with ops recorded into streams, each stream run as one program. A process per test file:
# fused eager compiles a program per op and one per stream, and one process of the whole suite would pass
# the kernel's limit on memory mappings (vm.max_map_count; docs/known-differences.md).
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

echo "== Deviceless compiles: programs also compiled for an H100, a B200 and a TPU v6e, none of them here =="
# The CUDA plugin and libtpu compile through their compile-only path (docs/aot.md). Each program is lowered
# as for those plugins and compiled for each target; a process with a failed compile exits with status 1
# and prints the program and the target's error. About 14 minutes on 2 cores: a target's compile of a
# program takes 0.1-1 s here, so the slice is chosen to hold every kind of program once or twice.
export TF_CPP_MIN_LOG_LEVEL=1 TORCH_PJRT_CACHE_DIR="$logs/aot-cache"
# Every OpInfo's first float32 sample (about 750 programs), for the H100.
TORCH_PJRT_AOT_TARGETS=h100 ../../.venv/bin/python -m torch_pjrt.conformance --samples 1 --dtype float32 --quiet
# Models, for all three: grouped products (chlo.ragged_dot there), a fused eager decode stream, compiled
# training steps, Transformers models (Llama, Qwen3-MoE) and Diffusers' Flux with a compiled transformer.
export TORCH_PJRT_AOT_TARGETS=h100,b200,tpu-v6e
aot_slice() { ../../.venv/bin/python -m pytest -q -p no:cacheprovider -p no:xdist --timeout "${TORCH_PJRT_TEST_TIMEOUT:-1200}" "$@"; }
aot_slice test_moe.py -k grouped_mm_2d_3d
aot_slice test_fused.py -k static_cache_greedy
aot_slice test_compile.py -k "compiled_training_matches_cpu or static_cache_generate"
aot_slice test_hf_models.py -k "float32_to_device and (llama or qwen3_moe)"
aot_slice test_diffusers.py -k "compiled_denoiser and flux and not repeated"
