"""Mixture-of-experts decoding with a ragged dot.

``torch.ops.torch_pjrt.ragged_dot(x[M, K], w[G, K, N], group_sizes[G]) -> [M, N]``: rows of ``x`` come in
contiguous groups, ``group_sizes[g]`` rows for group ``g``, and row ``m`` of group ``g`` is ``x[m] @ w[g]``.
Rows past ``group_sizes.sum()`` are zero. Differentiable in ``x`` and ``w``; a fake kernel lets
torch.compile trace it. On "tpu" it runs as one device program (``aten::_grouped_mm``'s native row: a
static-shape loop over the non-empty groups, after one batched dot over every group's first rows where
most groups have rows; no host sync); elsewhere a reference implementation runs, so a model that uses
it runs anywhere.

``experts_implementation="ragged_dot"``: a Transformers experts implementation built on it. Tokens are
routed with a stable argsort and a per-expert count (a scatter-add into a fixed-size vector), so
routing has static shapes: no ``nonzero``, no ``where``, no sync. It is registered with Transformers'
``ExpertsInterface`` as soon as ``transformers.integrations.moe`` is imported (or at once if it already
is); :func:`register_experts` does it explicitly.
"""

import torch

from ._import_hooks import when_imported

__all__ = ["ragged_dot", "ragged_dot_experts_forward", "register_experts"]

_lib = torch.library.Library("torch_pjrt", "FRAGMENT")
_lib.define("ragged_dot(Tensor x, Tensor w, Tensor group_sizes) -> Tensor")
# The weight gradient: result[g] = x[rows of g].T @ dy[rows of g], zero for empty groups.
_lib.define("ragged_dot_weight_grad(Tensor x, Tensor dy, Tensor group_sizes) -> Tensor")


def _check(x, w, group_sizes, name="ragged_dot"):
    torch._check(
        x.dim() == 2 and w.dim() == 3 and group_sizes.dim() == 1,
        lambda: f"{name}: expected x[M, K], w[G, K, N] and group_sizes[G], got x{tuple(x.shape)}, "
        f"w{tuple(w.shape)} and group_sizes{tuple(group_sizes.shape)}",
    )
    torch._check(
        x.size(1) == w.size(1) and group_sizes.size(0) == w.size(0),
        lambda: f"{name}: shapes do not match: x{tuple(x.shape)}, w{tuple(w.shape)}, group_sizes{tuple(group_sizes.shape)}",
    )
    torch._check(
        x.dtype == w.dtype and x.dtype.is_floating_point,
        lambda: f"{name}: x and w must have the same floating dtype, got {x.dtype} and {w.dtype}",
    )
    torch._check(
        not group_sizes.dtype.is_floating_point and not group_sizes.dtype.is_complex and group_sizes.dtype != torch.bool,
        lambda: f"{name}: group_sizes must be an integer tensor, got {group_sizes.dtype}",
    )


def _offsets(group_sizes):
    return torch.cumsum(group_sizes, 0, dtype=torch.int32)


# ------------------------------------------------------------------------------------- reference (CPU, any)
def _bounds(group_sizes, rows):
    """(group, start, end) of the non-empty groups, clamped to `rows`; a host sync (reference only)."""
    start = 0
    for g, n in enumerate(group_sizes.tolist()):
        end = min(start + max(int(n), 0), rows)
        if end > start:
            yield g, start, end
        start = end


def _ragged_dot_reference(x, w, group_sizes):
    _check(x, w, group_sizes)
    out = torch.zeros(x.size(0), w.size(2), dtype=x.dtype, device=x.device)
    for g, s, e in _bounds(group_sizes, x.size(0)):
        out[s:e] = x[s:e] @ w[g]
    return out


def _weight_grad_reference(x, dy, group_sizes):
    out = torch.zeros(group_sizes.size(0), x.size(1), dy.size(1), dtype=x.dtype, device=x.device)
    for g, s, e in _bounds(group_sizes, x.size(0)):
        out[g] = x[s:e].T @ dy[s:e]
    return out


# ----------------------------------------------------------------------------------- "tpu": the native row
def _ragged_dot_tpu(x, w, group_sizes):
    _check(x, w, group_sizes)
    if x.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        return _ragged_dot_reference(x, w, group_sizes)
    return torch._grouped_mm(x, w, offs=_offsets(group_sizes))


def _weight_grad_tpu(x, dy, group_sizes):
    if x.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        return _weight_grad_reference(x, dy, group_sizes)
    # rows past the last group must not contribute: _grouped_mm's 2D x 2D form ignores them
    return torch._grouped_mm(x.T, dy, offs=_offsets(group_sizes))


_lib.impl("ragged_dot", _ragged_dot_reference, "CompositeExplicitAutograd")
_lib.impl("ragged_dot_weight_grad", _weight_grad_reference, "CompositeExplicitAutograd")
_lib.impl("ragged_dot", _ragged_dot_tpu, "PrivateUse1")
_lib.impl("ragged_dot_weight_grad", _weight_grad_tpu, "PrivateUse1")


@torch.library.register_fake("torch_pjrt::ragged_dot")
def _ragged_dot_fake(x, w, group_sizes):
    _check(x, w, group_sizes)
    return x.new_empty(x.size(0), w.size(2))


@torch.library.register_fake("torch_pjrt::ragged_dot_weight_grad")
def _weight_grad_fake(x, dy, group_sizes):
    return x.new_empty(group_sizes.size(0), x.size(1), dy.size(1))


def _setup_context(ctx, inputs, output):
    x, w, group_sizes = inputs
    ctx.save_for_backward(x, w, group_sizes)


def _backward(ctx, dy):
    x, w, group_sizes = ctx.saved_tensors
    dx = dw = None
    if ctx.needs_input_grad[0]:
        dx = torch.ops.torch_pjrt.ragged_dot(dy, w.transpose(1, 2), group_sizes)
    if ctx.needs_input_grad[1]:
        dw = torch.ops.torch_pjrt.ragged_dot_weight_grad(x, dy, group_sizes)
    return dx, dw, None


torch.library.register_autograd("torch_pjrt::ragged_dot", _backward, setup_context=_setup_context)


def ragged_dot(x, w, group_sizes):
    """``torch.ops.torch_pjrt.ragged_dot``: see the module docstring."""
    return torch.ops.torch_pjrt.ragged_dot(x, w, group_sizes)


# ------------------------------------------------------------------------------ Transformers experts forward
def ragged_dot_experts_forward(self, hidden_states, top_k_index, top_k_weights):
    """An experts forward for Transformers' ``ExpertsInterface``: ``[T, H]`` tokens, ``[T, k]`` expert ids
    and routing weights -> ``[T, H]``. Static shapes throughout: the (token, expert) pairs are sorted by
    expert, counted per expert into a fixed-size vector, and run through two ragged dots."""
    num_tokens, hidden = hidden_states.shape
    top_k = top_k_index.size(-1)
    num_experts = self.num_experts
    expert_ids = top_k_index.reshape(-1)
    order = torch.argsort(expert_ids, stable=True)
    sorted_ids = expert_ids[order]
    x = hidden_states[order // top_k]
    # tokens per expert: a scatter-add into a fixed-size count; ids past the last expert (expert-parallel
    # sentinels) land in a spill slot, so their rows sort last and fall past the groups (zero rows)
    spill = sorted_ids.clamp(0, num_experts)
    counts = torch.zeros(num_experts + 1, dtype=torch.int32, device=x.device)
    counts = counts.scatter_add(0, spill, torch.ones_like(spill, dtype=torch.int32))[:num_experts]

    if self.has_gate:
        w1, b1 = self.gate_up_proj, getattr(self, "gate_up_proj_bias", None)
    else:
        w1, b1 = self.up_proj, getattr(self, "up_proj_bias", None)
    w2, b2 = self.down_proj, getattr(self, "down_proj_bias", None)
    if not self.is_transposed:  # stored [E, out, in]; the ragged dot takes [E, in, out]
        w1, w2 = w1.transpose(1, 2), w2.transpose(1, 2)
    bias_ids = sorted_ids.clamp(0, num_experts - 1)

    h = ragged_dot(x.to(w1.dtype), w1, counts)
    if self.has_bias:
        h = h + b1[bias_ids]
    h = self._apply_gate(h) if self.has_gate else self.act_fn(h)
    h = ragged_dot(h.to(w2.dtype), w2, counts)
    if self.has_bias:
        h = h + b2[bias_ids]
    if getattr(self, "has_post_expert_norm", False):
        h = self.post_expert_norm(h)
    weights = top_k_weights.reshape(-1)[order]
    weighted = h * weights.unsqueeze(-1)
    if getattr(self, "_is_expert_parallel", False):
        weighted = weighted.masked_fill((sorted_ids >= num_experts).unsqueeze(-1), 0.0)
    # back to token order, then the sum over each token's experts (in float32 for half types, as the
    # other implementations do)
    inverse = torch.empty_like(order).scatter_(0, order, torch.arange(order.numel(), device=order.device))
    out = weighted[inverse].view(num_tokens, top_k, hidden).sum(dim=1)
    return out.to(hidden_states.dtype)


def register_experts():
    """Registers ``"ragged_dot"`` with Transformers' ``ExpertsInterface``. Returns False when this
    Transformers has no experts interface."""
    try:
        from transformers.integrations.moe import ExpertsInterface
    except ImportError:
        return False
    ExpertsInterface.register("ragged_dot", ragged_dot_experts_forward)
    return True


def _install_transformers_hook():
    """Registers the experts implementation when Transformers' MoE integration is imported, so that
    ``import torch`` never pays for importing Transformers."""

    def register(module):
        if hasattr(module, "ExpertsInterface"):
            module.ExpertsInterface.register("ragged_dot", ragged_dot_experts_forward)

    when_imported("transformers.integrations.moe", register)
