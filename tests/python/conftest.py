import os

# Native coverage: an op without a lowering is an error in tests, never a silent CPU round trip.
# Tests that exercise the fallback itself switch the policy locally.
os.environ.setdefault("TORCH_PJRT_FALLBACK", "error")

import pytest  # noqa: E402
import torch  # noqa: E402

import torch_pjrt  # noqa: E402, F401


@pytest.fixture
def fallback_policy():
    """Sets the fallback policy for one test and restores it afterwards."""
    old = torch_pjrt.get_fallback_policy()
    yield torch_pjrt.set_fallback_policy
    torch_pjrt.set_fallback_policy(old)
