"""Peak host memory of from_pretrained for a ~240 MB safetensors model: device_map="tpu" against the CPU.

Each load runs in a fresh process. Two peaks, both relative to the moment before the load: the kernel's
high-water mark of resident memory (VmHWM, reset right before the load), which includes the safetensors
file's pages mapped while reading (page cache, not a copy), and the peak of anonymous memory (RssAnon,
sampled every 2 ms): the copies the process itself makes. With the CPU PJRT plugin the device buffers are
themselves anonymous host memory, so a tpu load necessarily holds one full copy of the weights there (the
device copy, reported as live_bytes). The bound: a tpu load's anonymous peak may exceed the CPU load's by
that device copy plus a quarter of the model and 32 MB. Materializing a second full host copy of the
weights on the way to the device (a whole CPU state dict, then a copy) would break it."""

import json
import os
import subprocess
import sys
import textwrap

os.environ["HF_HUB_OFFLINE"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("transformers")

pytestmark = pytest.mark.skipif(not torch.tpu.is_available(), reason="no tpu device")

_CHILD = textwrap.dedent(
    """
    import json, os, sys
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch, torch_pjrt, transformers

    def status(key):
        for line in open("/proc/self/status"):
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024

    import threading
    peaks = {"RssAnon": 0, "RssFile": 0}
    done = threading.Event()

    def poll():  # the kernel keeps no high-water mark per kind, so sample it
        while not done.is_set():
            for k in peaks:
                peaks[k] = max(peaks[k], status(k))
            done.wait(0.002)

    path, device = sys.argv[1], sys.argv[2]
    torch.ones(1, device="tpu").cpu()  # the plugin is up before the measurement starts
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current resident size
    before = status("VmRSS")
    anon_before = status("RssAnon")
    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    kw = {} if device == "cpu" else {"device_map": device}
    model = transformers.AutoModelForCausalLM.from_pretrained(path, **kw)
    if device != "cpu":
        torch.tpu.synchronize()
    peak = status("VmHWM")
    done.set()
    thread.join()
    params = {p.device.type for p in model.parameters()}
    print(json.dumps({"peak": peak - before, "anon_peak": peaks["RssAnon"] - anon_before,
                      "live_bytes": torch_pjrt.metrics()["live_bytes"], "devices": sorted(params)}))
    """
)


def _load(path, device):
    out = subprocess.run([sys.executable, "-c", _CHILD, str(path), device], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def big_model(tmp_path_factory):
    import transformers as tf

    cfg = tf.LlamaConfig(vocab_size=32000, hidden_size=512, intermediate_size=1536, num_hidden_layers=8,
                         num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=512)
    torch.manual_seed(0)
    model = tf.LlamaForCausalLM(cfg)
    path = tmp_path_factory.mktemp("big")
    model.save_pretrained(path, safe_serialization=True)
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    del model
    return path, nbytes


def test_peak_host_memory_of_loading(big_model):
    path, nbytes = big_model
    if not os.path.exists("/proc/self/clear_refs"):
        pytest.skip("needs Linux /proc/self/clear_refs")
    cpu = _load(path, "cpu")
    tpu = _load(path, "tpu")
    mb = 2**20
    print(f"\nmodel {nbytes / mb:.0f} MB; peak host memory of the load (VmHWM): cpu {cpu['peak'] / mb:.0f} MB, "
          f"tpu {tpu['peak'] / mb:.0f} MB; anonymous: cpu {cpu['anon_peak'] / mb:.0f} MB, "
          f"tpu {tpu['anon_peak'] / mb:.0f} MB, of which device buffers {tpu['live_bytes'] / mb:.0f} MB")
    assert cpu["devices"] == ["cpu"] and tpu["devices"] == ["tpu"]
    assert tpu["live_bytes"] >= nbytes
    assert tpu["anon_peak"] <= cpu["anon_peak"] + tpu["live_bytes"] + nbytes // 4 + 32 * mb, (cpu, tpu, nbytes)
