"""Batch normalization against the CPU: outputs, gradients, running statistics, train and eval."""

import copy

import pytest
import torch


@pytest.mark.parametrize("track", [True, False])
@pytest.mark.parametrize("module,shape", [(torch.nn.BatchNorm2d, (4, 3, 5, 5)), (torch.nn.BatchNorm1d, (8, 3)),
                                          (torch.nn.BatchNorm1d, (4, 3, 7))])
def test_batch_norm(module, shape, track):
    torch.manual_seed(0)
    bn = module(3, track_running_stats=track, momentum=0.2)
    bn.weight.data.uniform_()
    bn.bias.data.uniform_()
    bt = copy.deepcopy(bn).to("tpu")
    for step in range(2):
        x = torch.randn(shape, requires_grad=True)
        xt = x.detach().to("tpu").requires_grad_()
        g = torch.randn(shape)
        y, yt = bn(x), bt(xt)
        y.backward(g)
        yt.backward(g.to("tpu"))
        torch.testing.assert_close(yt.cpu(), y)
        torch.testing.assert_close(xt.grad.cpu(), x.grad)
    torch.testing.assert_close(bt.weight.grad.cpu(), bn.weight.grad)
    torch.testing.assert_close(bt.bias.grad.cpu(), bn.bias.grad)
    if track:
        torch.testing.assert_close(bt.running_mean.cpu(), bn.running_mean)
        torch.testing.assert_close(bt.running_var.cpu(), bn.running_var)
        assert bt.num_batches_tracked.item() == bn.num_batches_tracked.item()
    bn.eval()
    bt.eval()
    x = torch.randn(shape)
    torch.testing.assert_close(bt(x.to("tpu")).cpu(), bn(x))
