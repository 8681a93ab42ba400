"""TorchTPU's public names on torch-pjrt (python/torch_pjrt/torchtpu.py): eager modes and the ragged dot,
results against the CPU."""

import pytest
import torch

import torch_pjrt
import torch_pjrt.moe  # noqa: F401  (torch.ops.torch_pjrt.ragged_dot)
from compare import assert_same


def test_eager_modes_as_call_and_context_manager():
    EagerMode = torch.tpu.EagerMode
    start = torch.tpu.eager_mode()
    x = torch.randn(8, 8)
    with torch.tpu.set_eager_mode(EagerMode.DEFER_AND_FUSE):
        assert torch_pjrt.get_eager_mode() == "fused" and torch.tpu.eager_mode() is EagerMode.DEFER_AND_FUSE
        y = (x.to("tpu") * 2).relu().sum(0)
    assert torch.tpu.eager_mode() is start
    assert_same(y, (x * 2).relu().sum(0))
    with torch.tpu.set_eager_mode("debug"):
        assert torch_pjrt._C._launch_blocking() and torch_pjrt.get_eager_mode() == "strict"
        assert_same(x.to("tpu").exp(), x.exp())
    assert torch.tpu.eager_mode() is start and not torch_pjrt._C._launch_blocking()
    torch.tpu.set_eager_mode(EagerMode.DEFER_NEVER)  # a plain call sets it at once
    try:
        assert torch.tpu.eager_mode() is EagerMode.DEFER_NEVER
    finally:
        torch.tpu.set_eager_mode(start)
    with pytest.raises(ValueError, match="expected an EagerMode or one of 'strict', 'debug', 'fused'"):
        torch.tpu.set_eager_mode("lazy")
    assert torch.tpu.eager_mode() is start


def test_ragged_dot_under_torchtpu_names():
    torch.manual_seed(0)
    x, w = torch.randn(10, 6), torch.randn(3, 6, 4)
    sizes = torch.tensor([4, 0, 5], dtype=torch.int32)
    # against the op's CPU path: plain torch ops, checked against the loop it stands for in test_moe.py
    want = torch.ops.torch_pjrt.ragged_dot(x, w, sizes)
    for fn in (torch.tpu.ops.ragged_dot, torch.ops.tpu.ragged_dot):
        assert_same(fn(x.to("tpu"), w.to("tpu"), sizes.to("tpu")), want, atol=1e-5, rtol=1e-5)
    xc, wc = x.clone().requires_grad_(), w.clone().requires_grad_()
    torch.ops.torch_pjrt.ragged_dot(xc, wc, sizes).square().sum().backward()
    xt, wt = x.to("tpu").requires_grad_(), w.to("tpu").requires_grad_()
    torch.ops.tpu.ragged_dot(xt, wt, sizes.to("tpu")).square().sum().backward()
    assert_same([xt.grad, wt.grad], [xc.grad, wc.grad], atol=1e-5, rtol=1e-5)
