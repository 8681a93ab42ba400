"""torch.compile(backend="tpu") with a Python int that changes between calls: Dynamo makes it a SymInt after
its second value, and where it shapes no tensor (an index, an offset, an operand) one program serves every
value (graph_syms: the host computes the scalars and the views' offsets; the program reads them). Each
result is compared with CPU eager on the same inputs; the count of lowered graphs shows that a third and
later value lower nothing new."""
import pytest
import torch

import torch_pjrt
import torch_pjrt.dynamo


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def lowered():
    return torch_pjrt.dynamo.stats["graphs_lowered"] + torch_pjrt.dynamo.stats["graphs_eager"]


def each_value(values, step):
    """step(v) for each value; returns the graphs lowered by the values after the second (Dynamo compiles the
    first as a constant and the second as a SymInt)."""
    for v in values[:2]:
        step(v)
    before = lowered()
    for v in values[2:]:
        step(v)
    return lowered() - before


def test_index_offset_and_operand_are_one_program():
    def f(t, i, x):
        s = t[i] * 2 + i
        return s + t[i + 1] + x[i : i + 2].sum() + t.narrow(0, i, 3).sum(0) + i * 0.5 + t[-1 - i]

    t, x = torch.randn(9, 4), torch.randn(10)
    tt, xt = t.to("tpu"), x.to("tpu")
    cf = torch.compile(f, backend="tpu")

    def step(i):
        torch.testing.assert_close(cf(tt, i, xt).cpu(), f(t, i, x), rtol=1e-6, atol=1e-6)

    assert each_value(list(range(6)), step) == 0


def test_write_at_an_index_into_an_input():
    def put(t, i, v):
        t[i] = v * 2
        t[:, 1] += i
        return t.sum(0)

    t, v = torch.randn(6, 3), torch.randn(3)
    tt = t.to("tpu")
    cf = torch.compile(put, backend="tpu")

    def step(i):
        out = cf(tt, i, v.to("tpu"))
        torch.testing.assert_close(out.cpu(), put(t, i, v), rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(tt.cpu(), t, rtol=1e-6, atol=1e-6)

    assert each_value([0, 1, 2, 5, 3], step) == 0


def test_gradients_through_an_index():
    """The forward saves the index for the backward (a SymInt output); the backward scatters at it."""
    def loss(w, i, x):
        return (w[i] * x).sum() + (w[i + 1] ** 2).sum()

    w = torch.randn(6, 3, requires_grad=True)
    wt = w.detach().to("tpu").requires_grad_()
    x = torch.randn(3)
    cf = torch.compile(loss, backend="tpu")

    def step(i):
        w.grad = wt.grad = None
        cf(wt, i, x.to("tpu")).backward()
        loss(w, i, x).backward()
        torch.testing.assert_close(wt.grad.cpu(), w.grad, rtol=1e-6, atol=1e-6)

    assert each_value([0, 1, 2, 3, 4], step) == 0


class EulerSteps:
    """A scheduler as Diffusers writes one: sigmas indexed by an int attribute that grows each step."""

    def __init__(self, device):
        self.sigmas = torch.linspace(1, 0, 21).to(device)
        self.step_index = 0

    def step(self, out, sample):
        sigma, sigma_next = self.sigmas[self.step_index], self.sigmas[self.step_index + 1]
        self.step_index += 1
        return sample + (sigma_next - sigma) * out


def test_scheduler_step_at_every_index_is_one_program():
    cpu, tpu = EulerSteps("cpu"), EulerSteps("tpu")
    step = torch.compile(tpu.step, backend="tpu")
    out, x = torch.randn(2, 8), torch.randn(2, 8)
    xt = x.to("tpu")

    def one(_):
        nonlocal x, xt
        x, xt = cpu.step(out, x), step(out.to("tpu"), xt)
        torch.testing.assert_close(xt.cpu(), x, rtol=1e-6, atol=1e-6)

    assert each_value(list(range(20)), one) == 0


def test_result_viewing_an_input_at_an_index_aliases_it():
    def row(t, i):
        return t[i]

    t = torch.randn(5, 3)
    tt = t.to("tpu")
    cf = torch.compile(row, backend="tpu")

    def step(i):
        r = cf(tt, i)
        assert r.storage_offset() == t[i].storage_offset()
        assert r.untyped_storage().data_ptr() == tt.untyped_storage().data_ptr()
        torch.testing.assert_close(r.cpu(), t[i])
        r.mul_(3)  # the caller's view: the write lands in the input
        t[i].mul_(3)
        torch.testing.assert_close(tt.cpu(), t)

    assert each_value([0, 1, 2, 4, 3], step) == 0


def test_index_out_of_range_raises_index_error():
    def f(t, i):
        return t[i] + 1

    tt = torch.randn(4, 2, device="tpu")
    cf = torch.compile(f, backend="tpu")
    cf(tt, 0), cf(tt, 1)
    with pytest.raises(IndexError):
        cf(tt, 4)
    torch.testing.assert_close(cf(tt, 2).cpu(), tt.cpu()[2] + 1)


def test_an_index_that_shapes_a_tensor_is_a_program_per_value():
    def head(t, i):
        return t[:i].sum(0)

    t = torch.randn(6, 3)
    cf = torch.compile(head, backend="tpu")
    for i in range(1, 6):
        torch.testing.assert_close(cf(t.to("tpu"), i).cpu(), head(t, i), rtol=1e-6, atol=1e-6)


def test_dynamic_shapes_tiny_llama_forward_per_length():
    """dynamic=True: the graph is traced once with a symbolic length and lowered per length (before, the
    per-shape retrace of Transformers' graph failed on a tensorified float: DataDependentOutputException)."""
    import sys

    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from hf_tiny import make_model

    model = make_model("llama").eval()
    tmodel = make_model("llama").to("tpu").eval()
    cf = torch.compile(tmodel, backend="tpu", dynamic=True)
    before = lowered()
    with torch.no_grad():
        for n in (17, 30, 17, 5):
            ids = torch.randint(3, 256, (1, n), generator=torch.Generator().manual_seed(n))
            torch.testing.assert_close(cf(ids.to("tpu")).logits.cpu(), model(ids).logits, rtol=1e-4, atol=1e-5)
    assert lowered() - before == 3  # a program per distinct length


def test_dynamic_shapes_training_steps_match_cpu():
    """Forward and backward graphs with a symbolic batch, each lowered per batch size."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    tmodel = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).to("tpu")
    tmodel.load_state_dict({k: v.to("tpu") for k, v in model.state_dict().items()})
    cf = torch.compile(tmodel, backend="tpu", dynamic=True)
    for batch in (3, 7, 3, 12):
        x = torch.randn(batch, 6)
        model.zero_grad(), tmodel.zero_grad()
        model(x).square().mean().backward()
        cf(x.to("tpu")).square().mean().backward()
        for p, tp in zip(model.parameters(), tmodel.parameters()):
            torch.testing.assert_close(tp.grad.cpu(), p.grad, rtol=1e-5, atol=1e-6)
