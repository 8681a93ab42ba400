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


@pytest.fixture
def strict_eager():
    """Runs one test under strict eager (one program per op) whatever TORCH_PJRT_EAGER says: for tests of
    what strict eager promises and fused eager does not (an execution per op, where an asynchronous
    failure surfaces and what it spares)."""
    old = torch_pjrt.get_eager_mode()
    torch_pjrt.set_eager_mode("strict")
    yield
    torch_pjrt.set_eager_mode(old)
