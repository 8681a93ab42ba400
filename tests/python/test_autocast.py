"""torch.autocast("tpu") applies torch's accelerator cast policies (the lists ATen publishes, as CUDA
uses): matmuls and linears in the autocast dtype, softmax/log_softmax/losses in float32. The expected
values are the same computation on the CPU with those casts written out by hand."""

import torch
import torch.nn.functional as F

BF16 = torch.bfloat16
BF16_TOL = dict(zip(("rtol", "atol"), torch.testing._comparison.default_tolerances(BF16)))


def test_cast_policies():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(8, 16, generator=g), torch.randn(16, 4, generator=g)
    w = torch.randn(4, 16, generator=g)
    ta, tb, tw = a.to("tpu"), b.to("tpu"), w.to("tpu")
    with torch.autocast("tpu", dtype=BF16):
        c = ta @ tb
        d = F.linear(ta, tw)
        e = torch.softmax(c, -1)
        f = torch.exp(d)
        h = c + d  # no policy: runs in the inputs' dtype
    expected_c = a.to(BF16) @ b.to(BF16)
    expected_d = F.linear(a.to(BF16), w.to(BF16))
    expected = [expected_c, expected_d, torch.softmax(expected_c.float(), -1), torch.exp(expected_d.float()),
                expected_c + expected_d]
    for got, exp in zip([c, d, e, f, h], expected):
        assert got.dtype == exp.dtype
        torch.testing.assert_close(got.cpu(), exp)


def test_training_step_under_autocast():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    tpu_model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).to("tpu")
    tpu_model.load_state_dict(model.state_dict())
    x, y = torch.randn(4, 8), torch.tensor([0, 1, 1, 0])

    l1, l2 = model[0], model[2]
    h = torch.relu(F.linear(x.to(BF16), l1.weight.to(BF16), l1.bias.to(BF16)))
    logits = F.linear(h, l2.weight.to(BF16), l2.bias.to(BF16))
    # cross_entropy asks log_softmax for the input's dtype (no fp32 cast), then nll_loss runs in float32
    loss = F.nll_loss(torch.log_softmax(logits, -1).float(), y)
    loss.backward()

    with torch.autocast("tpu", dtype=BF16):
        tpu_loss = F.cross_entropy(tpu_model(x.to("tpu")), y.to("tpu"))
    tpu_loss.backward()
    assert tpu_loss.dtype == torch.float32
    # the loss averages bfloat16 log-probabilities: it carries bfloat16's precision (CPU's bfloat16
    # log_softmax and ours may round an element differently by one unit)
    torch.testing.assert_close(tpu_loss.cpu(), loss, **BF16_TOL)
    # Gradients flow through bfloat16 activations, where CPU's and our kernels may round single elements
    # differently; what must hold is that they are float32 and equal the CPU's to bfloat16 accuracy.
    for p, q in zip(tpu_model.parameters(), model.parameters()):
        assert p.grad.dtype == torch.float32
        rel = ((p.grad.cpu() - q.grad).norm() / q.grad.norm()).item()
        assert rel < 2 ** -6, f"relative gradient error {rel:.2e}"
