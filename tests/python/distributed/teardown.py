"""How a torchrun worker ends: after its process group is destroyed, without the interpreter's teardown.

torch 2.13's teardown of a process that ran DDP over gloo aborts now and then at exit ("terminate called
without an active exception", SIGABRT on one rank): 3 of 10 two-process runs of train_worker.py's ddp scenario
on device cpu with gloo and torch_pjrt not loaded (TORCH_DEVICE_BACKEND_AUTOLOAD=0), on the loaded 2-core
machine. A launch whose every check passed would fail on it; the workers' results are all printed by then.
"""

import os
import sys


def finish(code=0):
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
