"""Ranks running different programs (MPMD: rank-only ops and data-dependent branches under fused eager, with
DDP, against a CPU run) and collectives the ranks disagree on (other shapes, another collective, a rank that
never calls it): a clear error on every rank that is in the collective, within the group's timeout, and
never a hang. The scenarios live in distributed/mpmd_worker.py."""

import pytest
from torchrun import expect_ok

SCENARIOS = ["mpmd", "mismatch", "missing", "missing_unchecked"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_mpmd(scenario):
    expect_ok("mpmd_worker.py", SCENARIOS, only=[scenario])
