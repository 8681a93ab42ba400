"""The "tpu" device itself: torch.device, torch.accelerator, the torch.tpu device module, the generated
methods, `python -m torch_pjrt info`, autoload, a missing plugin, program caching and several devices.

Numeric results are compared with PyTorch on CPU on the same inputs. Checks that need a fresh process
(autoload, environment settings, fresh counters) run a small script in a subprocess with the same
interpreter and the same PYTHONPATH.
"""

import gc
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_pjrt

TIMEOUT = 180  # seconds for one subprocess; importing torch takes a few seconds on a busy machine


def _pythonpath():
    """The current PYTHONPATH, led by the folder this torch_pjrt was imported from (so a subprocess
    tests the same build as this process)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(torch_pjrt.__file__)))
    parts = [here] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(dict.fromkeys(parts))


class Launched:
    """sys.executable started with `args` and extra environment `env` (variables in `drop` removed).
    Started at once, collected by result(): the subprocess tests' scripts run side by side."""

    def __init__(self, args, env=None, drop=()):
        full = dict(os.environ)
        for k in drop:
            full.pop(k, None)
        full["PYTHONPATH"] = _pythonpath()
        full.update(env or {})
        self.proc = subprocess.Popen([sys.executable, *args], env=full, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.done = None

    def result(self):
        """(returncode, stdout, stderr), waiting at most TIMEOUT seconds."""
        if self.done is None:
            try:
                out, err = self.proc.communicate(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                self.kill()
                raise
            self.done = (self.proc.returncode, out, err)
        return self.done

    def json(self, tag="RESULT"):
        """The decoded JSON of the script's one '<tag>: <json>' line."""
        rc, out, err = self.result()
        assert rc == 0, f"subprocess failed ({rc}):\n{out}\n{err}"
        lines = [l for l in out.splitlines() if l.startswith(tag + ": ")]
        assert len(lines) == 1, f"no {tag} line:\n{out}\n{err}"
        return json.loads(lines[0][len(tag) + 2:])

    def kill(self):
        if self.done is None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.communicate()


def script(code, env=None, drop=()):
    return Launched(["-c", textwrap.dedent(code)], env=env, drop=drop)


# ------------------------------------------------------------------------------- device and accelerator

def test_torch_device():
    d = torch.device("tpu")
    assert d.type == "tpu" and d.index is None
    assert torch.device("tpu:0") == torch.device("tpu", 0)
    assert torch.device("tpu:0").index == 0
    t = torch.ones(2, device="tpu")
    assert t.device == torch.device("tpu:0")
    assert t.device.type == "tpu"


def test_accelerator():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("tpu")
    assert torch.accelerator.device_count() == torch.tpu.device_count()
    assert torch.accelerator.device_count() >= 1


def test_is_available_and_count():
    assert torch.tpu.is_available() is True
    assert torch.tpu.device_count() >= 1
    assert len(torch_pjrt.plugin_info()["devices"]) == torch.tpu.device_count()


def test_current_and_set_device():
    assert torch.tpu.current_device() == 0
    torch.tpu.set_device(0)
    assert torch.tpu.current_device() == 0
    torch.tpu.set_device("tpu:0")
    assert torch.tpu.current_device() == 0
    torch.tpu.set_device(torch.device("tpu", 0))
    assert torch.tpu.current_device() == 0


def test_device_context_manager():
    with torch.tpu.device(0):
        assert torch.tpu.current_device() == 0
        assert torch.ones(1, device="tpu").device == torch.device("tpu:0")
    with torch.tpu.device("tpu:0"):
        assert torch.tpu.current_device() == 0
    assert torch.tpu.current_device() == 0


def test_synchronize():
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    y = x.to("tpu") * 3
    torch.tpu.synchronize()
    torch.tpu.synchronize(0)
    torch.tpu.synchronize("tpu:0")
    assert torch.equal(y.cpu(), x * 3)


def test_device_name_and_properties():
    info = torch_pjrt.plugin_info()
    assert info["available"] is True
    kind = info["devices"][0]["kind"]
    assert torch.tpu.get_device_name() == kind
    assert torch.tpu.get_device_name(0) == kind
    props = torch.tpu.get_device_properties(0)
    assert props.name == kind
    assert isinstance(props.total_memory, int) and props.total_memory > 0
    assert torch.tpu.get_device_properties().name == kind


def test_mem_get_info():
    free, total = torch.tpu.mem_get_info()
    assert total > 0
    assert 0 <= free <= total
    free0, total0 = torch.tpu.mem_get_info(0)
    assert total0 == total


def test_memory_allocated_tracks_tensors():
    gc.collect()
    torch.tpu.synchronize()
    nbytes = 1 << 22  # 4 MiB of float32
    before = torch.tpu.memory_allocated()
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() == before
    t = torch.ones(nbytes // 4, device="tpu")
    torch.tpu.synchronize()
    assert torch.tpu.memory_allocated() >= before + nbytes
    assert torch.tpu.max_memory_allocated() >= before + nbytes
    assert torch.tpu.memory_allocated(0) == torch.tpu.memory_allocated()
    assert t.sum().item() == nbytes // 4
    del t
    gc.collect()
    assert torch.tpu.memory_allocated() == before
    assert torch.tpu.max_memory_allocated() >= before + nbytes  # the peak is kept ...
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() == before  # ... until it is reset
    torch.tpu.empty_cache()
    assert torch.tpu.memory_allocated() == before


def test_empty_cache_gives_freed_host_memory_back():
    """On the CPU plugin the process keeps freed heap memory for the next programs' buffers and
    temporaries (TORCH_PJRT_KEEP_FREED_MEMORY); torch.tpu.empty_cache() gives it back to the system."""
    import torch_pjrt

    if torch_pjrt.plugin_info().get("platform") != "cpu":
        pytest.skip("the device's memory is not the host's heap")
    if os.environ.get("TORCH_PJRT_KEEP_FREED_MEMORY") == "0":
        pytest.skip("freed memory is not kept")

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    # 24 MiB blocks (below glibc's 32 MiB limit for heap blocks), freed in the middle of the heap
    blocks = [torch.ones(6 << 20, device="tpu") for _ in range(8)]
    torch.tpu.synchronize()
    keep = blocks[-1]
    del blocks[:-1]
    gc.collect()
    before = rss()
    torch.tpu.empty_cache()
    assert rss() < before - (100 << 20), (before >> 20, rss() >> 20)
    assert keep.sum().item() == 6 << 20


def test_amp_supported_dtype():
    dtypes = torch.tpu.get_amp_supported_dtype()
    assert torch.bfloat16 in dtypes
    assert all(isinstance(d, torch.dtype) and d.is_floating_point for d in dtypes)


def test_rng_state_round_trip():
    torch.tpu.manual_seed(1234)
    assert torch.tpu.initial_seed() == 1234
    state = torch.tpu.get_rng_state()
    assert isinstance(state, torch.Tensor)
    assert state.dtype == torch.uint8 and state.device.type == "cpu" and state.numel() > 0
    torch.tpu.manual_seed(99)
    assert not torch.equal(torch.tpu.get_rng_state(), state)
    torch.tpu.set_rng_state(state)
    assert torch.equal(torch.tpu.get_rng_state(), state)
    torch.tpu.seed()
    s = torch.tpu.initial_seed()
    assert isinstance(s, int)
    torch.tpu.manual_seed(s)
    assert torch.tpu.initial_seed() == s


def test_rng_state_reproduces_random_values():
    torch.tpu.manual_seed(7)
    state = torch.tpu.get_rng_state()
    a = torch.rand(16, device="tpu").cpu()
    b = torch.rand(16, device="tpu").cpu()
    assert not torch.equal(a, b)  # the generator advanced
    torch.tpu.set_rng_state(state)
    assert torch.equal(torch.rand(16, device="tpu").cpu(), a)
    torch.tpu.manual_seed(7)
    assert torch.equal(torch.rand(16, device="tpu").cpu(), a)


def test_not_in_bad_fork():
    assert torch.tpu._is_in_bad_fork() is False


def test_backends_is_built():
    assert torch.backends.tpu.is_built() is True
    assert torch.backends.tpu.is_available() is True


# ----------------------------------------------------------------------------------- generated methods

def test_tensor_tpu_and_is_tpu():
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    t = x.tpu()
    assert t.is_tpu and not x.is_tpu
    assert t.device == torch.device("tpu:0")
    assert torch.equal(t.cpu(), x)
    assert x.tpu(0).device == torch.device("tpu:0")


def test_module_tpu():
    torch.manual_seed(0)
    cpu_model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 3))
    tpu_model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 3))
    tpu_model.load_state_dict(cpu_model.state_dict())
    assert tpu_model.tpu() is tpu_model
    assert all(p.is_tpu for p in tpu_model.parameters())
    x = torch.randn(4, 5)
    got = tpu_model(x.tpu())
    assert got.is_tpu
    torch.testing.assert_close(got.cpu(), cpu_model(x))


def test_untyped_storage_tpu():
    src = torch.tensor([1, -2, 3, 2**30], dtype=torch.int32)
    s = src.untyped_storage()
    st = s.tpu()
    assert st.device.type == "tpu"
    assert st.nbytes() == s.nbytes()
    assert list(st.cpu()) == list(s)
    empty = torch.UntypedStorage(8).tpu()
    assert empty.device.type == "tpu" and empty.nbytes() == 8


# --------------------------------------------------------------------------------------- subprocesses

AUTOLOAD_THEN_HEADLINE = """
    import json, sys
    import torch
    t = torch.ones(2, device="tpu")  # no import of torch_pjrt: the torch.backends entry point loads it
    autoload = {"device": str(t.device), "values": t.cpu().tolist(), "loaded": "torch_pjrt" in sys.modules}

    # The headline expression in this fresh process: compiled (or loaded from disk) once, then cached.
    import torch_pjrt
    torch_pjrt.set_fallback_policy("error")
    m0 = torch_pjrt.metrics()
    r1 = torch.ones(2, 3, device="tpu") * 2 + 1
    first = {"device": str(r1.device), "dtype": str(r1.dtype), "values": r1.cpu().tolist()}
    m1 = torch_pjrt.metrics()
    r2 = torch.ones(2, 3, device="tpu") * 2 + 1
    second = r2.cpu().tolist()
    m2 = torch_pjrt.metrics()
    print("RESULT: " + json.dumps({"autoload": autoload, "first": first, "second": second, "m": [m0, m1, m2]}))
    """

NO_PLUGIN = """
    import json
    import torch, torch_pjrt
    out = {"available": torch.tpu.is_available(), "count": torch.tpu.device_count()}
    try:
        torch.ones(1, device="tpu")
        out["error"] = None
    except RuntimeError as e:
        out["error"] = str(e)
    print("RESULT: " + json.dumps(out))
    """

# With autoload disabled `import torch` leaves "tpu" alone; then torch_pjrt, imported explicitly, finds
# the plugin that TORCH_PJRT_PLUGIN names missing.
NO_AUTOLOAD_THEN_NO_PLUGIN = """
    import json, sys
    import torch
    print("RESULT: " + json.dumps({"tpu": hasattr(torch, "tpu"), "loaded": "torch_pjrt" in sys.modules}))
    """ + NO_PLUGIN.replace('print("RESULT: "', 'print("RESULT2: "')

TWO_DEVICES = """
    import json
    import torch, torch_pjrt
    out = {"count": torch.tpu.device_count(), "acc_count": torch.accelerator.device_count(),
           "names": [torch.tpu.get_device_name(i) for i in range(torch.tpu.device_count())]}
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    t = x.to("tpu:1")
    r = t * 3 - 1
    out["r_device"] = str(r.device)
    out["r"] = r.cpu().tolist()
    z = r.to("tpu:0")
    out["z_device"] = str(z.device)
    out["z"] = (z + 1).cpu().tolist()
    torch.tpu.set_device(1)
    out["after_set"] = torch.tpu.current_device()
    out["default_on_1"] = str(torch.ones(1, device="tpu").device)
    torch.tpu.set_device(0)
    with torch.tpu.device(1):
        out["in_ctx"] = torch.tpu.current_device()
        out["ctx_tensor"] = str(torch.zeros(2, device="tpu").device)
    out["after_ctx"] = torch.tpu.current_device()
    torch.tpu.synchronize(1)
    print("RESULT: " + json.dumps(out))
    """

# TORCH_PJRT_CPU_THREADS: the CPU plugin's pools sized from it (their threads are named tf_XLAEigen), and
# PJRT_NPROC, through which the plugin reads it, as the user had it afterwards (here: set to 3, as another
# client in the process would read it); the results still the CPU's
CPU_THREADS = """
    import collections, ctypes, json, os
    import torch, torch_pjrt
    a = torch.randn(300, 200, generator=torch.Generator().manual_seed(0))
    b = torch.randn(200, 100, generator=torch.Generator().manual_seed(1))
    got = (a.to("tpu") @ b.to("tpu")).softmax(-1).sum(0).cpu()
    names = collections.Counter(open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task"))
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_char_p
    print("RESULT: " + json.dumps({"got": got.tolist(), "xla_threads": names.get("tf_XLAEigen", 0),
                                   "nproc": (libc.getenv(b"PJRT_NPROC") or b"").decode()}))
    """


def _hide_cpu_plugin(folder):
    """A script prefix under which the search roots hold no CPU plugin: the sys.path folder holding it
    is replaced, in the subprocess only, by `folder` of links to all it holds but the plugin's package.
    None where the plugin is not under a sys.path folder."""
    plugin = os.path.realpath(torch_pjrt.plugin_info()["path"])
    roots = {os.path.realpath(p) for p in sys.path if p and os.path.isdir(p)}
    root = os.path.dirname(plugin)
    while root not in roots and os.path.dirname(root) != root:
        root = os.path.dirname(root)
    if root not in roots:
        return None
    top = os.path.relpath(plugin, root).split(os.sep)[0]
    for name in os.listdir(root):
        if name != top:
            os.symlink(os.path.join(root, name), os.path.join(folder, name))
    return textwrap.dedent(f"""
        import os, site, sys
        root, shadow = {root!r}, {str(folder)!r}
        sys.path[:] = [shadow if p and os.path.realpath(p) == root else p for p in sys.path]
        site.getsitepackages = lambda prefixes=None: [shadow]
        """)


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """Every subprocess of this file, started together on first use."""
    hide = _hide_cpu_plugin(tmp_path_factory.mktemp("site"))
    procs = {
        "info": Launched(["-m", "torch_pjrt", "info"]),
        "autoload": script(AUTOLOAD_THEN_HEADLINE, env={"TORCH_PJRT_FALLBACK": "error"},
                           drop=["TORCH_DEVICE_BACKEND_AUTOLOAD"]),
        "no_autoload": script(NO_AUTOLOAD_THEN_NO_PLUGIN, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0",
                                                               "TORCH_PJRT_PLUGIN": "/nonexistent/plugin.so"}),
        "missing_cpu": None if hide is None else script(
            hide + textwrap.dedent(NO_PLUGIN), env={"TORCH_PJRT_PLUGIN": "cpu"}),
        "two_devices": script(TWO_DEVICES, env={"TORCH_PJRT_CPU_DEVICES": "2", "TORCH_PJRT_FALLBACK": "error"}),
        "one_thread": script(CPU_THREADS, env={"TORCH_PJRT_CPU_THREADS": "1", "PJRT_NPROC": "3"}),
        "bad_threads": script(NO_PLUGIN, env={"TORCH_PJRT_CPU_THREADS": "two"}),
    }
    yield procs
    for p in procs.values():
        if p is not None:
            p.kill()


def test_info_command(launched):
    rc, out, err = launched["info"].result()
    assert rc == 0, out + err
    assert torch_pjrt.plugin_info()["path"] in out
    assert re.search(r"^\s*tpu:0\b", out, re.M), out


def test_autoload_on_import_torch(launched):
    out = launched["autoload"].json()["autoload"]
    assert out == {"device": "tpu:0", "values": torch.ones(2).tolist(), "loaded": True}


def test_autoload_disabled(launched):
    assert launched["no_autoload"].json() == {"tpu": False, "loaded": False}


def test_missing_plugin_path(launched):
    out = launched["no_autoload"].json("RESULT2")
    assert out["available"] is False
    assert out["count"] == 0
    assert out["error"] is not None, "creating a tpu tensor without a plugin did not raise"
    assert "/nonexistent/plugin.so" in out["error"]


def test_missing_cpu_plugin_names_wheel(launched):
    """TORCH_PJRT_PLUGIN=cpu where the search roots hold no CPU plugin."""
    if launched["missing_cpu"] is None:
        pytest.skip("the CPU plugin is not under a sys.path folder")
    out = launched["missing_cpu"].json()
    assert out["available"] is False
    assert out["count"] == 0
    assert out["error"] is not None, "creating a tpu tensor without a plugin did not raise"
    assert "xla-cpu-pjrt" in out["error"]


def test_headline_expression_compiles_then_hits_cache(launched):
    out = launched["autoload"].json()
    expected = torch.ones(2, 3) * 2 + 1
    assert out["first"] == {"device": "tpu:0", "dtype": str(expected.dtype), "values": expected.tolist()}
    assert out["second"] == expected.tolist()
    m0, m1, m2 = out["m"]
    for m in (m0, m1, m2):
        assert m["fallback_total"] == 0 and m["fallbacks"] == {}
    assert m1["compiles"] + m1["disk_cache_hits"] > m0["compiles"] + m0["disk_cache_hits"]
    assert m1["cache_misses"] > m0["cache_misses"]
    assert m1["executions"] > m0["executions"]
    assert m2["cache_hits"] > m1["cache_hits"]
    assert m2["cache_misses"] == m1["cache_misses"]
    assert m2["compiles"] == m1["compiles"]
    assert m2["executions"] > m1["executions"]


def test_two_cpu_devices(launched):
    out = launched["two_devices"].json()
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    assert out["count"] == 2 and out["acc_count"] == 2
    assert len(out["names"]) == 2 and out["names"][0] == out["names"][1]
    assert out["r_device"] == "tpu:1"
    torch.testing.assert_close(torch.tensor(out["r"]), x * 3 - 1)
    assert out["z_device"] == "tpu:0"
    torch.testing.assert_close(torch.tensor(out["z"]), x * 3 - 1 + 1)
    assert out["after_set"] == 1 and out["default_on_1"] == "tpu:1"
    assert out["in_ctx"] == 1 and out["ctx_tensor"] == "tpu:1"
    assert out["after_ctx"] == 0


def test_cpu_threads_setting(launched):
    """TORCH_PJRT_CPU_THREADS=1: one intra-op thread in the CPU plugin, the user's PJRT_NPROC kept."""
    if torch_pjrt.plugin_info()["platform"] != "cpu":
        pytest.skip("a setting of the CPU plugin")
    out = launched["one_thread"].json()
    a = torch.randn(300, 200, generator=torch.Generator().manual_seed(0))
    b = torch.randn(200, 100, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(torch.tensor(out["got"]), (a @ b).softmax(-1).sum(0))
    assert out["xla_threads"] == 1
    assert out["nproc"] == "3"


def test_cpu_threads_setting_rejects_bad_values(launched):
    if torch_pjrt.plugin_info()["platform"] != "cpu":
        pytest.skip("a setting of the CPU plugin")
    out = launched["bad_threads"].json()
    assert out["available"] is False and out["count"] == 0
    assert "TORCH_PJRT_CPU_THREADS" in out["error"] and "'two'" in out["error"], out["error"]
