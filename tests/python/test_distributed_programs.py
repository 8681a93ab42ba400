"""tpu_dist's program transport: ranks as threads of one process, each on its own device of the CPU plugin
(TORCH_PJRT_CPU_DEVICES=2), run collectives as StableHLO programs (all_reduce in every op the plugin's
collectives take, broadcast, all_gather, reduce_scatter, equal all_to_all) and the rest through the host
(PREMUL_SUM, bitwise reductions of integers, uneven all_to_all); DDP trains over it. Every result against
the CPU (distributed/threads_worker.py, run in a process of its own: the plugin's device count is set at start).
"""

import os
import re
import subprocess
import sys

from torchrun import TIMEOUT_S, WORKERS, tail

CHECKS = ["all_reduce_SUM_float32", "all_reduce_PRODUCT_int64", "all_reduce_MAX_bool", "all_reduce_BXOR_int32",
          "all_reduce_AVG_int64", "all_reduce_SUM_complex64", "all_reduce_view", "broadcast",
          "all_gather_into_tensor_stacked_transposed", "reduce_scatter_tensor_AVG", "all_to_all_single",
          "all_to_all_single_uneven_host", "premul_sum_host", "ddp", "transports"]


def test_program_transport_threads():
    env = dict(os.environ, TORCH_PJRT_CPU_DEVICES="2", TORCH_PJRT_FALLBACK="error", PYTHONUNBUFFERED="1")
    proc = subprocess.run([sys.executable, str(WORKERS / "threads_worker.py")], env=env, capture_output=True,
                          text=True, timeout=TIMEOUT_S)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"threads_worker exited with {proc.returncode}:\n{tail(out)}"
    assert "FAIL" not in proc.stdout, tail(out)
    for name in CHECKS:
        assert re.search(rf"^OK {name}\b", proc.stdout, re.M), f"no 'OK {name}' line:\n{tail(out)}"
