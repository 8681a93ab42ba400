"""Smoke test of an installed wheel, run by test.sh in a fresh venv that holds only CPU torch and
torch-pjrt[cpu]: the autoload, the device, ops and a tiny model's forward and backward against the CPU.
Run it from outside the source tree, so the installed package is what it imports."""

import importlib.metadata
import os
import subprocess
import sys
import sysconfig

import torch  # the torch.backends entry point imports torch_pjrt: no `import torch_pjrt` here


def check_autoload():
    assert "torch_pjrt" in sys.modules, "import torch did not load torch_pjrt (the torch.backends entry point)"
    import torch_pjrt

    site = sysconfig.get_paths()["platlib"]
    assert torch_pjrt.__file__.startswith(site), f"not the installed package: {torch_pjrt.__file__}"
    ext = sys.modules["torch_pjrt._C"].__file__
    minor = "_".join(torch.__version__.split("+")[0].split(".")[:2])
    assert f"_C_torch{minor}." in os.path.basename(ext), (ext, torch.__version__)
    reqs = importlib.metadata.requires("torch-pjrt")
    assert any(r.startswith("torch") and "<" in r for r in reqs), reqs
    print(f"torch {torch.__version__}, torch_pjrt from {torch_pjrt.__file__}, extension {os.path.basename(ext)}")


def check_device():
    assert torch.tpu.is_available() and torch.tpu.device_count() >= 1
    x = torch.ones(2, 3, device="tpu")
    assert x.device.type == "tpu" and str(x.device) == "tpu:0", x.device
    import torch_pjrt

    info = torch_pjrt.plugin_info()
    assert info["available"] and info["kind"] == "cpu", info  # the [cpu] extra's plugin
    print(f"device: {torch.tpu.get_device_name()}, plugin {info['path']}")


def check_ops():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 48, generator=g), torch.randn(48, 32, generator=g)
    want = torch.nn.functional.softmax(a @ b, dim=-1).sum(0)
    got = torch.nn.functional.softmax(a.to("tpu") @ b.to("tpu"), dim=-1).sum(0)
    assert got.device.type == "tpu"
    torch.testing.assert_close(got.cpu(), want)
    idx = torch.tensor([3, 0, 2])
    torch.testing.assert_close(a.to("tpu")[idx].cpu(), a[idx])


def check_model():
    torch.manual_seed(0)
    model = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)
    x = torch.randn(2, 5, 32)
    want = model(x)
    want.square().mean().backward()
    want_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model.to("tpu")
    got = model(x.to("tpu"))
    got.square().mean().backward()
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)
    for (name, p), g in zip(model.named_parameters(), want_grads):
        torch.testing.assert_close(p.grad.cpu(), g, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")


def check_no_extension_for_other_torch():
    """A torch minor the wheel holds no extension for: an ImportError naming the supported ones."""
    code = ("import torch; torch.__version__ = '2.99.0+cpu'\n"
            "try:\n    import torch_pjrt\nexcept ImportError as e:\n    print(e)\nelse:\n    print('imported')")
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    msg = out.stdout.strip()
    minor = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    assert "no extension for torch 2.99.0" in msg and minor in msg, (msg, out.stderr[-2000:])


if __name__ == "__main__":
    for check in (check_autoload, check_device, check_ops, check_model, check_no_extension_for_other_torch):
        check()
        print(f"ok: {check.__name__}")
