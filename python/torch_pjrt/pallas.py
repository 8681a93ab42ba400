"""``torch.tpu.pallas``: TorchTPU's names for JAX and Pallas kernels as PyTorch ops (torch_pjrt.jax_op).

``jax_op(fn)`` / ``jax_op("ns::name", fn)`` and ``custom_jax_kernel(fn, name=, static_argnums=)`` make a PyTorch
op of a JAX function; a ``pallas_call`` inside it is lowered for the device's plugin: Mosaic on TPUs, Triton
on GPUs, interpret mode (plain StableHLO) on the CPU plugin. :func:`interpret_by_default` says which.
"""

from .jax_ops import JaxOp, _interpret_default, _platform, custom_jax_kernel, jax_op

__all__ = ["jax_op", "custom_jax_kernel", "JaxOp", "interpret_by_default"]


def interpret_by_default() -> bool:
    """Whether a pallas_call is lowered in interpret mode here (the CPU plugin, or
    ``TORCH_PJRT_PALLAS_INTERPRET=1``); ``jax_op(..., interpret=)`` overrides it per op."""
    return _interpret_default(_platform())
