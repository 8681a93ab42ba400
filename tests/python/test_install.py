"""The installed package: the extension chosen by torch minor, the ImportError for a torch it has no
extension for, the wheel's torch requirement. (test.sh also builds the wheel and smoke-tests it in a clean
venv: tests/wheel/smoke.py.)"""

import importlib.metadata
import os
import subprocess
import sys

import torch
import torch_pjrt
from packaging.requirements import Requirement

MINOR = ".".join(torch.__version__.split("+")[0].split(".")[:2])


def run(code, **env):
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0", **env)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)


def test_loads_the_extension_for_this_torch():
    built = torch_pjrt._extensions()
    assert MINOR in built
    assert sys.modules["torch_pjrt._C"] is torch_pjrt._C
    assert torch_pjrt._C.__file__ == built[MINOR]
    assert os.path.basename(built[MINOR]).startswith(f"_C_torch{MINOR.replace('.', '_')}.")


def test_a_torch_without_an_extension_is_an_import_error_naming_the_supported_ones():
    out = run("import torch; torch.__version__ = '2.99.1+cpu'\n"
              "try:\n    import torch_pjrt\nexcept ImportError as e:\n    print('ImportError:', e)\n"
              "else:\n    print('imported')")
    assert out.returncode == 0, out.stderr[-3000:]
    msg = out.stdout
    assert msg.startswith("ImportError: torch_pjrt ") and "no extension for torch 2.99.1+cpu" in msg, msg
    assert f"it supports torch {', '.join(torch_pjrt._extensions())}" in msg, msg
    assert "pip install" in msg, msg


def test_the_failed_import_leaves_no_half_loaded_extension():
    out = run("import sys, torch; torch.__version__ = '1.0.0'\n"
              "try:\n    import torch_pjrt\nexcept ImportError:\n    pass\n"
              "print('torch_pjrt._C' in sys.modules, torch._C._get_privateuse1_backend_name())")
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["False", "privateuseone"], out.stdout


def test_the_torch_requirement_covers_this_torch():
    reqs = [Requirement(r) for r in importlib.metadata.requires("torch-pjrt")]
    torch_req = [r for r in reqs if r.name == "torch" and not r.marker]
    assert len(torch_req) == 1, reqs
    version = torch.__version__.split("+")[0]
    assert torch_req[0].specifier.contains(version), (torch_req, version)
    # only the minors there is an extension for
    major, minor = map(int, MINOR.split("."))
    assert not torch_req[0].specifier.contains(f"{major}.{minor + 1 + len(torch_pjrt._extensions())}.0")
    extras = {str(r.marker).split('"')[1] for r in reqs if r.marker}
    assert {"cpu", "cuda", "tpu"} <= extras, extras


def test_info_names_the_extension():
    out = subprocess.run([sys.executable, "-m", "torch_pjrt", "info"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(l for l in out.stdout.splitlines() if l.startswith("extensions:"))
    assert f"for torch {', '.join(torch_pjrt._extensions())}" in line and "_C_torch" in line, line
