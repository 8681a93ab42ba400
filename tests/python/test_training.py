"""Training loops on "tpu" against the same loops on the CPU, from the same weights and data.

Natively (the fallback is an error in tests): per-step losses agree within 1e-4 relative and the final
gradients within 1e-4. Dropout is 0 where randomness would make the two devices differ.
"""

import copy

import pytest
import torch
import torch.nn as nn

import torch_pjrt


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.norm = nn.GroupNorm(4, 16)
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        x = self.pool(torch.nn.functional.silu(self.norm(self.conv2(x))))
        return self.head(x.flatten(1))


class SmallTransformer(nn.Module):
    def __init__(self, vocab=50, d=32, heads=4, layers=2, classes=5):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=64, dropout=0.0, batch_first=True,
                                           activation="gelu")
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, tokens):
        h = self.encoder(self.embed(tokens))
        return self.head(self.norm(h).mean(1))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 32), nn.GELU(), nn.Linear(32, 4))

    def forward(self, x):
        return self.net(x)


def data(kind, steps):
    g = torch.Generator().manual_seed(1)
    if kind == "cnn":
        return [(torch.randn(4, 3, 16, 16, generator=g), torch.randint(0, 10, (4,), generator=g))
                for _ in range(steps)]
    if kind == "transformer":
        return [(torch.randint(0, 50, (4, 12), generator=g), torch.randint(0, 5, (4,), generator=g))
                for _ in range(steps)]
    return [(torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)) for _ in range(steps)]


def train(model, batches, device, opt_name="adamw", compiled=False):
    """Trains on `batches`; returns the per-step losses and the last gradients. `compiled` runs the model's
    forward (and backward) through torch.compile(backend="tpu") (test_compile.py)."""
    model = model.to(device)
    step_model = torch.compile(model, backend="tpu") if compiled else model
    if opt_name == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    elif opt_name == "adamw-fused":
        # the CPU reference uses foreach: fused and foreach compute the same update
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, fused=(device == "tpu"))
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for x, y in batches:
        x, y = x.to(device), y.to(device)
        loss = nn.functional.cross_entropy(step_model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    grads = {n: p.grad.detach().cpu() for n, p in model.named_parameters()}
    return losses, grads


@pytest.mark.parametrize("kind,factory,opt_name", [
    ("mlp", MLP, "adamw"),
    ("mlp", MLP, "sgd"),
    ("mlp", MLP, "adamw-fused"),
    ("cnn", SmallCNN, "adamw"),
    ("transformer", SmallTransformer, "adamw"),
])
def test_training_matches_cpu(kind, factory, opt_name):
    torch.manual_seed(0)
    model = factory()
    batches = data(kind, 20)
    before = torch_pjrt.metrics()["fallback_total"]
    cpu_losses, cpu_grads = train(copy.deepcopy(model), batches, "cpu", opt_name)
    tpu_losses, tpu_grads = train(copy.deepcopy(model), batches, "tpu", opt_name)
    assert torch_pjrt.metrics()["fallback_total"] == before
    torch.testing.assert_close(torch.tensor(tpu_losses), torch.tensor(cpu_losses), rtol=1e-4, atol=0)
    for name, g in cpu_grads.items():
        torch.testing.assert_close(tpu_grads[name], g, rtol=1e-4, atol=1e-4, msg=f"gradient of {name}")


def test_memory_returns_to_baseline_over_1000_steps():
    torch.manual_seed(0)
    model = MLP().to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(8, 16).to("tpu"), torch.randint(0, 4, (8,)).to("tpu")

    def step():
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    for _ in range(5):
        step()
    torch.tpu.synchronize()
    base = torch_pjrt.metrics()
    for _ in range(1000):
        loss = step()
    del loss
    torch.tpu.synchronize()
    after = torch_pjrt.metrics()
    assert after["live_buffers"] == base["live_buffers"]
    assert after["live_bytes"] == base["live_bytes"]
    assert after["compiles"] == base["compiles"], "steady-state steps must not compile new programs"


def test_changing_learning_rate_compiles_nothing_new():
    """Python numbers (lr, Adam's bias corrections, alpha) reach programs as run-time inputs."""
    torch.manual_seed(0)
    for fused in (False, True):
        model = MLP().to("tpu")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=fused)
        sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)
        x, y = torch.randn(8, 16).to("tpu"), torch.randint(0, 4, (8,)).to("tpu")
        for i in range(8):
            if i == 3:
                torch.tpu.synchronize()
                compiles = torch_pjrt.metrics()["compiles"] + torch_pjrt.metrics()["disk_cache_hits"]
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        after = torch_pjrt.metrics()["compiles"] + torch_pjrt.metrics()["disk_cache_hits"]
        assert after == compiles, f"fused={fused}: {after - compiles} new programs while only lr changed"
