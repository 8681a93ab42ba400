#!/usr/bin/env bash
# The GPU checks, on a machine with an NVIDIA GPU, torch and jax-cuda13-pjrt (nothing else needed there):
#   1. smoke: the CUDA plugin loads, ops and a float32 matmul agree with the CPU;
#   2. the MoE decode benchmark at Qwen3-30B-A3B's layer widths in bfloat16;
#   3. the ragged-dot tests of tests/python/test_moe.py on the CUDA plugin, against the CPU;
#   4. ragged_dot through the loop lowering (TORCH_PJRT_RAGGED_DOT=loop) for comparison;
#   5. more test files (MORE_TESTS), in whatever time is left of DEADLINE seconds (default 480).
# STEPS picks and orders steps (default: smoke moe_bench moe_tests moe_bench_loop more_tests; also
# moe_bench_fused: the benchmark under fused eager); MOE_BATCHES and MOE_IMPLS narrow the benchmark.
# The extension comes prebuilt for that machine's torch and Python (PREBUILT=folder holding _C*.so; see
# docs/gpu.md for the cross-build) or is built there. Wheels in .whl/ (a newer transformers) are
# installed to a private folder first. Logs go to $OUT (default /tmp/device-out), one file per step.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${OUT:-/tmp/device-out}
mkdir -p "$out"
py=${PYTHON:-python3}
t0=$(date +%s)
if ls .whl/*.whl >/dev/null 2>&1; then
  $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl &&
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
pkg=/tmp/torch-pjrt-pkg
mkdir -p $pkg/torch_pjrt
cp python/torch_pjrt/*.py $pkg/torch_pjrt/
export PYTHONPATH=$pkg${PYTHONPATH:+:$PYTHONPATH} TORCH_PJRT_PLUGIN=${TORCH_PJRT_PLUGIN:-cuda} \
  TORCH_PJRT_CACHE_DIR=/tmp/torch-pjrt-cache PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
if [ -n "${PREBUILT:-}" ] && cp "$PREBUILT"/_C*.so $pkg/torch_pjrt/ && $py -c "import torch_pjrt"; then
  echo "prebuilt extension from $PREBUILT"
else
  echo "building the extension here"
  cmake -S . -B /tmp/torch-pjrt-build -G Ninja -DPython3_EXECUTABLE="$(command -v $py)" \
    -DCMAKE_BUILD_TYPE=Release >/dev/null &&
    cmake --build /tmp/torch-pjrt-build -j "$(nproc)" --target _C >"$out/build.log" 2>&1 &&
    cp /tmp/torch-pjrt-build/_C*.so $pkg/torch_pjrt/ || { tail -30 "$out/build.log"; exit 1; }
fi
echo "set-up took $(($(date +%s) - t0)) s"

deadline=$((t0 + ${DEADLINE:-480}))  # seconds for the whole script: later steps get what is left
step() {  # step NAME SECONDS command...: runs it with a time limit, its output in $OUT/NAME.log
  local name=$1 limit=$2
  shift 2
  local left=$((deadline - $(date +%s)))
  if [ "$left" -lt 20 ]; then echo "== $name: skipped, ${left}s left"; return; fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name (limit ${limit}s)"
  local s
  s=$(date +%s)
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  tail -n "${TAIL:-40}" "$out/$name.log"
  echo "== $name: rc $rc in $(($(date +%s) - s)) s"
}

smoke() {
  step smoke 120 $py - <<'EOF'
import time, torch, torch_pjrt
p = torch.tpu.get_device_properties()
print("torch", torch.__version__, "| devices", torch.tpu.device_count(), "|", torch.tpu.get_device_name(), "|", p)
g = torch.Generator().manual_seed(0)
a, b = torch.randn(1024, 1024, generator=g), torch.randn(1024, 1024, generator=g)
ref = (a.double() @ b.double())
for name, fn in [("matmul f32", lambda x, y: x @ y), ("softmax", lambda x, y: torch.softmax(x, -1)),
                 ("layer_norm", lambda x, y: torch.nn.functional.layer_norm(x, (1024,))),
                 ("conv2d", lambda x, y: torch.nn.functional.conv2d(x.view(4, 16, 128, 128), y[:16].reshape(64, 16, 4, 4)[:, :, :3, :3].contiguous())),
                 ("sum", lambda x, y: x.sum(0)), ("sort", lambda x, y: x.sort(-1).values),
                 ("bf16 matmul", lambda x, y: (x.bfloat16() @ y.bfloat16()).float())]:
    want = fn(a, b)
    got = fn(a.to("tpu"), b.to("tpu")).cpu()
    print(f"{name:12s} max |tpu - cpu| {(got - want).abs().max().item():.3g}")
d = (a.to("tpu") @ b.to("tpu")).cpu().double()
print(f"float32 matmul vs float64: tpu {(d - ref).abs().max().item():.3g}, cpu {((a @ b).double() - ref).abs().max().item():.3g} (TF32 would be ~1e-1)")
x = torch.randn(8, device="tpu")
for _ in range(200): x = x + 1
torch.tpu.synchronize()
t = time.perf_counter()
for _ in range(2000): x = x + 1
torch.tpu.synchronize()
print(f"cached eager add: {(time.perf_counter() - t) / 2000 * 1e6:.1f} us/op")
EOF
}
moe=($py bench/moe_decode.py --dtypes bfloat16 --hidden 2048 --intermediate 768 --no-cpu)
batches=${MOE_BATCHES:-1,4,16,64}
for s in ${STEPS:-smoke moe_bench moe_tests moe_bench_loop more_tests}; do
  case $s in
    smoke) smoke ;;
    moe_bench) step moe_bench 210 "${moe[@]}" --batches "$batches" --impls "${MOE_IMPLS:-eager,batched_mm,grouped_mm,ragged_dot}" ;;
    # the whole step as one program (fused eager): Transformers' implementations that need no host sync
    moe_bench_fused) step moe_bench_fused 150 env TORCH_PJRT_EAGER=fused "${moe[@]}" --batches "$batches" \
      --impls batched_mm,grouped_mm,ragged_dot ;;
    moe_tests) step moe_tests 120 $py -m pytest -q -p no:cacheprovider tests/python/test_moe.py -k "ragged or grouped or experts" ;;
    moe_bench_loop) step moe_bench_loop 60 env TORCH_PJRT_RAGGED_DOT=loop "${moe[@]}" --batches "$batches" --impls ragged_dot ;;
    more_tests) step more_tests 300 $py -m pytest -q -p no:cacheprovider ${MORE_TESTS:-tests/python/test_hf_generate.py tests/python/test_training.py} ;;
    *) echo "unknown step $s" ;;
  esac
done
echo "all steps took $(($(date +%s) - t0)) s"
