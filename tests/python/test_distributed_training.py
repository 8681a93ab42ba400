"""Two-process training with torch.distributed (DDP, Accelerate's DDP, FSDP2, FSDP2 mixed precision, DTensor tensor
parallelism on an MLP and on a tiny Llama, DDP, FSDP2 and the TP MLP under torch.compile), each checked by the worker against a
single-process float32 CPU reference: per-step losses and final parameters within 1e-5 (fsdp_mp: against a
bfloat16 emulation; see distributed/train_worker.py for the tolerances and their reasons).

The worker runs under torchrun (2 processes, one device each). DIST_DEVICE selects what is tested:
  tpu (default): "tpu" devices, init_process_group("cpu:gloo,tpu:tpu_dist"), torch.compile backend "tpu";
  cpu: device cpu with gloo, which checks the scenarios and references themselves without torch-pjrt.

The scenarios run in two torchrun launches (process start and imports cost seconds each); each scenario is
its own test, which passes on the worker's ``OK <scenario>`` line.
"""

import os

import pytest
from torchrun import expect_ok

DEVICE = os.environ.get("DIST_DEVICE", "tpu")
GROUPS = {
    "plain": ["ddp", "accelerate", "fsdp", "fsdp_mp", "tp_mlp"],
    # transformers' import and Dynamo's first compile are the slow parts: together in one launch
    "llama_compile": ["tp_llama", "ddp_compile", "fsdp_compile", "tp_compile"],
}
SCENARIO_GROUP = {s: g for g, ss in GROUPS.items() for s in ss}


@pytest.mark.parametrize("scenario", [s for ss in GROUPS.values() for s in ss])
def test_distributed_training(scenario):
    expect_ok("train_worker.py", GROUPS[SCENARIO_GROUP[scenario]], env={"DIST_DEVICE": DEVICE}, only=[scenario])
