"""Device spec for running Hugging Face Transformers' own test suite on "tpu".

Transformers' ``testing_utils`` imports the file named by ``TRANSFORMERS_TEST_DEVICE_SPEC`` as a module
whose name is that path without ``.py``, so the path must be a bare file name in the current folder.
``python -m torch_pjrt transformers-spec [DIR]`` writes such a file (``torch_pjrt_spec.py``, one line
importing this module) into DIR (default: the current folder). Then, from a clone of the transformers tag
that matches the installed version (the tests are not in the wheel):

    python -m torch_pjrt transformers-spec
    TRANSFORMERS_TEST_DEVICE_SPEC=torch_pjrt_spec.py python -m pytest tests/models/llama

Names read by transformers 5.24: ``DEVICE_NAME`` (required), ``MANUAL_SEED_FN``, ``EMPTY_CACHE_FN``,
``DEVICE_COUNT_FN``. The others are here for the tables newer versions read the same way.

Diffusers reads the same file the same way: ``DIFFUSERS_TEST_DEVICE_SPEC=torch_pjrt_spec.py`` (a bare file
name again) makes ``diffusers.utils.testing_utils.torch_device`` "tpu" and fills its ``BACKEND_*`` tables
from ``MANUAL_SEED_FN``, ``EMPTY_CACHE_FN``, ``DEVICE_COUNT_FN``, ``RESET_PEAK_MEMORY_STATS_FN``,
``RESET_MAX_MEMORY_ALLOCATED_FN`` and ``MAX_MEMORY_ALLOCATED_FN`` (``SUPPORTS_TRAINING`` keeps its default,
True). Diffusers 0.42 has no spec name for its ``BACKEND_SYNCHRONIZE`` table.
"""

import torch

import torch_pjrt  # noqa: F401  (registers the "tpu" device)

DEVICE_NAME = "tpu"
MANUAL_SEED_FN = torch.tpu.manual_seed
EMPTY_CACHE_FN = torch.tpu.empty_cache
DEVICE_COUNT_FN = torch.tpu.device_count
SYNCHRONIZE_FN = torch.tpu.synchronize
MEMORY_ALLOCATED_FN = torch.tpu.memory_allocated
MAX_MEMORY_ALLOCATED_FN = torch.tpu.max_memory_allocated
RESET_PEAK_MEMORY_STATS_FN = torch.tpu.reset_peak_memory_stats
RESET_MAX_MEMORY_ALLOCATED_FN = torch.tpu.reset_peak_memory_stats

STUB_NAME = "torch_pjrt_spec.py"


def write_stub(folder=".") -> str:
    """Writes ``torch_pjrt_spec.py`` (``from torch_pjrt.transformers_spec import *``) into ``folder``."""
    import os

    path = os.path.join(folder, STUB_NAME)
    with open(path, "w") as f:
        f.write('"""TRANSFORMERS_TEST_DEVICE_SPEC for torch_pjrt\'s "tpu" device."""\n'
                "from torch_pjrt.transformers_spec import *  # noqa: F401,F403\n"
                "from torch_pjrt.transformers_spec import DEVICE_NAME  # noqa: F401\n")
    return path
