"""Hugging Face sharded models across 2 processes (torchrun): Transformers tensor parallelism (tp_plan="auto") of a
tiny Qwen3 and Qwen3-MoE with greedy generation, and Diffusers enable_parallelism (tensor parallel and Ulysses
context parallel) of a tiny Flux transformer, each checked against the unsharded model on the CPU. The scenarios
live in distributed/hf_worker.py.

DIST_DEVICE=tpu (default): the sharded models run on "tpu", init_process_group("cpu:gloo,tpu:tpu_dist").
DIST_DEVICE=cpu: the same scenarios on "cpu" with gloo, without torch-pjrt (proves the scenarios themselves).
"""

import os

import pytest
from torchrun import expect_ok

SCENARIOS = ["qwen3_tp", "qwen3_moe_tp", "flux_tp", "flux_cp"]

pytest.importorskip("transformers")
pytest.importorskip("diffusers")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_hf_sharded_model_matches_unsharded_cpu(scenario):
    # One launch for all four scenarios: most of the time is starting two Python processes and importing the
    # Hugging Face stack.
    expect_ok("hf_worker.py", SCENARIOS, env={"DIST_DEVICE": os.environ.get("DIST_DEVICE", "tpu")}, only=[scenario])
