"""The main job: train a small model on "tpu" and on the CPU from the same start and check that the
per-step losses agree. Exit status 0 means the device reproduced PyTorch's CPU results."""

import time

import torch


def _model():
    return torch.nn.Sequential(
        torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.LayerNorm(64), torch.nn.Linear(64, 4)
    )


def _train(model, xs, ys, steps, device):
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for i in range(steps):
        x, y = xs[i % len(xs)].to(device), ys[i % len(ys)].to(device)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def run(steps: int = 20) -> int:
    import torch_pjrt

    if not torch.tpu.is_available():
        print(f"no tpu device: {torch_pjrt.plugin_info().get('reason')}")
        return 1
    torch.manual_seed(0)
    xs = [torch.randn(32, 16) for _ in range(4)]
    ys = [torch.randint(0, 4, (32,)) for _ in range(4)]
    start = _model()
    cpu_model, tpu_model = _model(), _model()
    cpu_model.load_state_dict(start.state_dict())
    tpu_model.load_state_dict(start.state_dict())
    t0 = time.perf_counter()
    cpu = _train(cpu_model, xs, ys, steps, "cpu")
    t1 = time.perf_counter()
    tpu = _train(tpu_model, xs, ys, steps, "tpu")
    t2 = time.perf_counter()
    worst = 0.0
    print(f"device: {torch.tpu.get_device_name()} via {torch_pjrt.plugin_info()['path']}")
    print(f"{'step':>4}  {'cpu loss':>12}  {'tpu loss':>12}  {'rel diff':>9}")
    for i, (a, b) in enumerate(zip(cpu, tpu)):
        rel = abs(a - b) / max(abs(a), 1e-12)
        worst = max(worst, rel)
        print(f"{i:>4}  {a:12.6f}  {b:12.6f}  {rel:9.2e}")
    m = torch_pjrt.metrics()
    print(f"cpu {t1 - t0:.2f}s, tpu {t2 - t1:.2f}s (includes {m['compiles']} compiles, {m['compile_seconds']:.2f}s); "
          f"fallbacks: {m['fallback_total']}")
    ok = worst <= 1e-4
    print("OK: tpu matches cpu" if ok else f"MISMATCH: worst relative loss difference {worst:.2e}")
    return 0 if ok else 1
