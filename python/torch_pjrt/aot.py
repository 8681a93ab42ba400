"""Deviceless compiles: every program a run compiles also compiles for GPUs and TPUs that are not here.

``TORCH_PJRT_AOT_TARGETS=h100,b200,tpu-v6e`` (read when the device starts) makes each program the run
lowers compile, through the target's own plugin and without its device, for every target named, lowered
as it would be on that device (no CPU host kernels; ``chlo.ragged_dot``). The run itself still runs on its
own device. NVIDIA targets need ``jax-cuda13-pjrt``, ``nvidia-cuda-nvcc`` and ``nvidia-nvvm``; TPU targets
need ``libtpu``. Compiles run on background threads (``TORCH_PJRT_AOT_THREADS``, default 2); each target's
executables are kept in the program
cache's folder (``aot/<target>-<build>/``), so a program compiles once per target across runs.

At exit the run waits for the compiles and prints one line per target; a failed compile is printed with
the program (op or graph and its shapes) and the target's error, and the process exits with status 1
(``TORCH_PJRT_AOT_FAILURES=report`` prints without changing the status). ``TORCH_PJRT_AOT_LOWERING=device``
hands the targets the programs exactly as this device runs them (on the CPU plugin, with its host kernels,
which the targets reject): a check that the per-target lowering is what makes them compile. :func:`report` returns the same
while running; ``torch_pjrt.metrics()["aot"]`` holds the counts.
"""

import atexit
import os
import sys

from . import _C

__all__ = ["report", "targets"]


def targets():
    """The target names ``TORCH_PJRT_AOT_TARGETS`` takes: ``{name: (plugin kind, device or topology)}``."""
    return {name: (plugin, device) for name, plugin, device in _C._aot_targets()}


def report(wait=True):
    """``{"targets": {name: counts}, "failures": [(target, program, error), ...]}`` for this run (empty when
    no target is set or the device has not started); ``wait`` first waits for the queued compiles."""
    return _C._aot_report(wait)


def _at_exit():
    r = report(wait=True)
    if not r:
        return
    for name, t in r["targets"].items():
        print(f"torch_pjrt AOT {name} ({t['device']}): {t['compiles']} compiled, {t['cached']} from the cache, "
              f"{t['failures']} failed, {t['compile_seconds']:.1f} s", file=sys.stderr)
    failures = r["failures"]
    for target, program, error in failures[:50]:
        print(f"torch_pjrt AOT failure on {target}: {program}\n    {error}", file=sys.stderr)
    if len(failures) > 50:
        print(f"torch_pjrt AOT: {len(failures) - 50} more failures", file=sys.stderr)
    if failures and os.environ.get("TORCH_PJRT_AOT_FAILURES", "raise") != "report":
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)


if os.environ.get("TORCH_PJRT_AOT_TARGETS"):
    atexit.register(_at_exit)
