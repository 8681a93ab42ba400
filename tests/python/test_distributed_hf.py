"""Hugging Face sharded models across 2 processes (torchrun): Transformers tensor parallelism (tp_plan="auto") of a
tiny Qwen3 and Qwen3-MoE with greedy generation, and Diffusers enable_parallelism (tensor parallel and Ulysses
context parallel) of a tiny Flux transformer, each checked against the unsharded model on the CPU. The scenarios
live in distributed/hf_worker.py.

DIST_DEVICE=tpu (default): the sharded models run on "tpu", init_process_group("cpu:gloo,tpu:tpu_dist").
DIST_DEVICE=cpu: the same scenarios on "cpu" with gloo, without torch-pjrt (proves the scenarios themselves).
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).parent / "distributed" / "hf_worker.py"
SCENARIOS = ["qwen3_tp", "qwen3_moe_tp", "flux_tp", "flux_cp"]
TIMEOUT_S = int(os.environ.get("TORCH_PJRT_DIST_TEST_TIMEOUT", "600"))

pytest.importorskip("transformers")
pytest.importorskip("diffusers")


def launch(scenarios):
    env = dict(
        os.environ,
        DIST_DEVICE=os.environ.get("DIST_DEVICE", "tpu"),
        # Two processes on a small machine: one thread each for the plugin's pools, the host kernels and torch.
        TORCH_PJRT_CPU_THREADS="1",
        TORCH_PJRT_KERNEL_THREADS="1",
        OMP_NUM_THREADS="1",
        HF_HUB_OFFLINE="1",
    )
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(WORKER),
           *scenarios]
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        def text(b):
            return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")

        pytest.fail(f"torchrun did not finish in {TIMEOUT_S}s ({' '.join(scenarios)})\n--- stdout ---\n"
                    f"{text(e.stdout)}\n--- stderr ---\n{text(e.stderr)[-20000:]}")
    log = f"--- stdout ---\n{out.stdout}\n--- stderr ---\n{out.stderr[-20000:]}"
    assert out.returncode == 0, f"torchrun exited with {out.returncode} ({' '.join(scenarios)})\n{log}"
    for name in scenarios:
        assert re.search(rf"^OK {name} ", out.stdout, re.M), f"no 'OK {name}' line\n{log}"
    print(out.stdout)


def test_hf_sharded_models_match_unsharded_cpu():
    # One launch for all four scenarios: most of the time is starting two Python processes and importing the
    # Hugging Face stack.
    launch(SCENARIOS)
