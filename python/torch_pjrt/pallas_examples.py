"""Pallas kernels written with ``pallas_call``, made PyTorch ops on "tpu" by :func:`torch_pjrt.jax_op`: the
examples of docs/kernels.md, used by the tests and ``bench/custom_kernels.py``. Importing this module needs JAX.

On TPUs they lower to Mosaic, on GPUs (with JAX's CUDA plugin) to Triton, and on the CPU plugin in
interpret mode (torch_pjrt.pallas.interpret_by_default()).
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from .jax_ops import jax_op

__all__ = ["matmul", "softmax", "rms_norm_matmul"]


def _matmul_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32).astype(o_ref.dtype)


@functools.partial(jax_op, name="pallas_matmul")
def matmul(x, y, block_m=None, block_n=None):
    """x[M, K] @ y[K, N], one [block_m, block_n] output tile per grid step (M and N multiples of the blocks;
    by default up to 32 rows and 128 columns: Mosaic takes blocks whose last dim is a multiple of 128 or the
    whole dim, and whose second-to-last a multiple of 8)."""
    m, k = x.shape
    n = y.shape[1]
    block_m = block_m or min(m, 32)
    block_n = block_n or min(n, 128)
    if m % block_m or n % block_n:
        raise ValueError(f"pallas matmul: M={m} and N={n} must be multiples of the blocks {block_m}, {block_n}")
    return pl.pallas_call(
        _matmul_kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
        grid=(m // block_m, n // block_n),
        in_specs=[pl.BlockSpec((block_m, k), lambda i, j: (i, 0)), pl.BlockSpec((k, block_n), lambda i, j: (0, j))],
        out_specs=pl.BlockSpec((block_m, block_n), lambda i, j: (i, j)),
    )(x, y)


def _softmax_kernel(x_ref, o_ref):
    x = x_ref[...].astype(jnp.float32)
    e = jnp.exp(x - jnp.max(x, axis=-1, keepdims=True))
    o_ref[...] = (e / jnp.sum(e, axis=-1, keepdims=True)).astype(o_ref.dtype)


@functools.partial(jax_op, name="pallas_softmax")
def softmax(x, block_rows=8):
    """Softmax over the last dim of x[R, C], fused (max, exp, sum, divide in one kernel), block_rows rows per
    grid step (R a multiple of it)."""
    r, c = x.shape
    if r % block_rows:
        raise ValueError(f"pallas softmax: R={r} must be a multiple of block_rows={block_rows}")
    return pl.pallas_call(
        _softmax_kernel,
        out_shape=jax.ShapeDtypeStruct((r, c), x.dtype),
        grid=(r // block_rows,),
        in_specs=[pl.BlockSpec((block_rows, c), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((block_rows, c), lambda i: (i, 0)),
    )(x)


@functools.partial(jax_op, name="rms_norm_matmul")
def rms_norm_matmul(x, w_norm, w, eps=1e-6):
    """RMSNorm of x[..., H] (weight w_norm[H]) then @ w[H, N]: one JAX function, one program (bench/custom_kernels.py)."""
    xf = x.astype(jnp.float32)
    normed = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
    return jnp.dot((normed * w_norm).astype(x.dtype), w, preferred_element_type=jnp.float32).astype(x.dtype)
