"""Two-process training scenarios, each checked against a single-process CPU reference.

Run under torchrun, one launch for several scenarios (process start and imports cost seconds):

    DIST_DEVICE=tpu python -m torch.distributed.run --standalone --nproc_per_node=2 \
        tests/python/distributed/train_worker.py ddp fsdp fsdp_mp tp_mlp

DIST_DEVICE picks the device and backend:
  tpu (default): ``import torch_pjrt``, ``init_process_group("cpu:gloo,tpu:tpu_dist")``, device
                 ``tpu:LOCAL_RANK`` (on the CPU plugin each process gets LOCAL_WORLD_SIZE devices).
  cpu:           ``init_process_group("gloo")``, device cpu. This proves the scenarios and their references
                 themselves, independently of torch-pjrt.

DIST_BACKEND overrides the init_process_group backend string (e.g. to try another "tpu" backend).

Scenarios: ddp, fsdp, fsdp_mp, tp_mlp, tp_llama, ddp_compile, fsdp_compile (see SCENARIOS).

Every scenario trains STEPS steps from seed-fixed weights and data and compares with a reference that trains
the same model from the same weights on the full global batch, float32 on the CPU, in this process, without
torch.distributed (so it is the same on every rank):
  * the loss of every step: the global loss (the mean of the ranks' shard losses, which equals the loss of
    the global batch for a mean-reduced loss over equal shards; under TP every rank's loss is the global one),
  * the final parameters, gathered whole (DTensor / FSDP2 ``full_tensor()``).

Tolerance (float32 scenarios): |a - b| <= TOL * max(1, |b|) with TOL = 1e-5, i.e. absolute for values below
1 (parameters, which are O(0.1-1)) and relative above (the Llama's cross entropy is ~4.9). The distributed run
and the reference compute the same math in a different order (a gradient summed over 4+4 rows and then
averaged across ranks against one sum over 8 rows; a row-parallel product summed as two partial products; on
"tpu" also XLA's kernels instead of ATen's), so they differ by rounding only: float32's unit roundoff is
6e-8, and the measured differences are 4e-8 - 1.2e-7 (cpu/gloo at world size 2; the same models trained on
"tpu" in one process against the CPU: 1.2e-7). 1e-5 is ~100x above that noise, while real errors are far
above it: a learning rate off by 0.1% already gives 1.8e-4 in ddp, a missing or doubled average or a wrong
shard ~1e-1.
SGD with momentum is used rather than Adam on purpose: Adam divides a gradient by its own running magnitude,
so an entry that is rounding noise around zero becomes a step of up to ~lr of either sign. Measured: with
AdamW (lr 1e-3 / 5e-4) the MLPs stay at 3e-8 but tp_llama's parameters differ by 3.3e-6, a third of the
tolerance, from cpu/gloo alone. fsdp_mp (bfloat16) has its own rule: see run_fsdp_mp.

Output: one line per scenario, ``OK <scenario> max_loss_diff=... max_param_diff=... time=...s`` (the
largest normalized differences over both ranks), printed by rank 0. A mismatch prints ``FAIL <scenario> ...``
with the worst entries on every rank, the remaining scenarios still run, and the process exits 1.
An exception prints ``ERROR <scenario>`` and the traceback and exits 2 (the other rank is then stopped by
torchrun; collectives would be out of step, so no further scenario runs).
"""

import copy
import datetime
import os
import sys
import time
import traceback

DEVICE_KIND = os.environ.get("DIST_DEVICE", "tpu")
if DEVICE_KIND not in ("cpu", "tpu"):
    sys.exit(f"train_worker: DIST_DEVICE must be 'cpu' or 'tpu', got {DEVICE_KIND!r}")
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from teardown import finish  # noqa: E402

STEPS = 10
TOL = 1e-5
GLOBAL_BATCH = 8
TIMEOUT_S = float(os.environ.get("DIST_TIMEOUT_S", "120"))

RANK = 0
WORLD = 1
DEVICE = torch.device("cpu")


class Mismatch(Exception):
    pass


# --------------------------------------------------------------------------------------------------------
# Set-up


def init():
    global RANK, WORLD, DEVICE
    timeout = datetime.timedelta(seconds=TIMEOUT_S)
    if DEVICE_KIND == "tpu":
        import torch_pjrt  # noqa: F401

        local_rank = int(os.environ["LOCAL_RANK"])
        # Under torchrun the CPU plugin gives each process LOCAL_WORLD_SIZE devices and starts it on
        # tpu:LOCAL_RANK, with no call of the user's.
        if torch.tpu.current_device() != local_rank:
            raise RuntimeError(f"the process starts on tpu:{torch.tpu.current_device()}, not tpu:{local_rank} "
                               f"(device_count {torch.tpu.device_count()})")
        DEVICE = torch.device("tpu", local_rank)
        dist.init_process_group(os.environ.get("DIST_BACKEND", "cpu:gloo,tpu:tpu_dist"), timeout=timeout)
    else:
        DEVICE = torch.device("cpu")
        dist.init_process_group(os.environ.get("DIST_BACKEND", "gloo"), timeout=timeout)
    RANK = dist.get_rank()
    WORLD = dist.get_world_size()
    if GLOBAL_BATCH % WORLD:
        raise RuntimeError(f"world size {WORLD} must divide the global batch {GLOBAL_BATCH}")


GRAPHS = []


def compile_backend():
    """The Dynamo backend, wrapped to record the graphs it is given (a scenario that compiled nothing, e.g.
    because Dynamo skipped the wrapped module, must not pass as compiled).

    cpu: "aot_eager" traces forward and backward through AOTAutograd (what a real backend sees) but runs the
    traced graphs eagerly, so it costs no code generation. tpu: torch_pjrt's "tpu" backend."""
    from torch._dynamo.backends.registry import lookup_backend

    inner = lookup_backend("tpu" if DEVICE_KIND == "tpu" else "aot_eager")

    def counting(gm, example_inputs, **kwargs):
        GRAPHS.append(sum(1 for n in gm.graph.nodes if n.op == "call_function"))
        return inner(gm, example_inputs, **kwargs)

    return counting


def reset_compiled():
    torch._dynamo.reset()
    GRAPHS.clear()


def compiled(model):
    reset_compiled()
    return torch.compile(model, backend=compile_backend())


def compiled_summary():
    if not GRAPHS or not sum(GRAPHS):
        raise Mismatch(f"torch.compile produced no graph with operations (graphs: {GRAPHS})")
    return f" graphs={len(GRAPHS)} graph_ops={sum(GRAPHS)}"


def split_pieces():
    """Program pieces the "tpu" backend lowered from graphs that hold collectives, so far."""
    if DEVICE_KIND != "tpu":
        return 0
    from torch_pjrt import dynamo

    return dynamo.stats.get("collective_splits", 0)


def shard(t):
    """This rank's rows of a global batch (data parallel)."""
    n = t.shape[0] // WORLD
    return t[RANK * n:(RANK + 1) * n]


def global_mean(loss):
    """The global batch's loss from the ranks' shard losses (equal shards, mean-reduced loss)."""
    t = loss.detach().clone()
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return (t / WORLD).item()


def full_params(model):
    """name -> whole float32 CPU tensor, for plain, DDP, FSDP2 and DTensor parameters (a collective for
    sharded ones, so every rank calls it in the same order)."""
    from torch.distributed.tensor import DTensor

    if isinstance(model, nn.parallel.DistributedDataParallel):
        model = model.module
    out = {}
    for name, p in model.named_parameters():
        name = name.replace("._orig_mod", "")  # a torch.compile'd submodule (fsdp_compile)
        t = p.detach()
        if isinstance(t, DTensor):
            t = t.full_tensor()
        out[name] = t.to("cpu", torch.float32).clone()
    return out


def require_sharded(model, expected):
    """Fails unless exactly `expected` parameters are DTensors sharded over the mesh (so that a scenario
    whose wrapping silently did nothing cannot pass on an undistributed model)."""
    from torch.distributed.tensor import DTensor, Shard

    n = sum(1 for p in model.parameters()
            if isinstance(p, DTensor) and any(isinstance(pl, Shard) for pl in p.placements))
    if n != expected:
        raise Mismatch(f"{n} sharded DTensor parameters, expected {expected}")


# --------------------------------------------------------------------------------------------------------
# Models and data


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 32), nn.GELU(), nn.Linear(32, 4))

    def forward(self, x):
        return self.net(x)


def mlp_data():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(GLOBAL_BATCH, 16, generator=g), torch.randn(GLOBAL_BATCH, 4, generator=g))
            for _ in range(STEPS)]


def make_mlp():
    torch.manual_seed(0)
    return MLP()


class TPMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(16, 64)
        self.down = nn.Linear(64, 16)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        return self.head(torch.tanh(self.down(F.gelu(self.up(x)))))


def make_tp_mlp():
    torch.manual_seed(0)
    return TPMLP()


def tp_mlp_data():
    g = torch.Generator().manual_seed(2)
    return [(torch.randn(GLOBAL_BATCH, 16, generator=g), torch.randn(GLOBAL_BATCH, 4, generator=g))
            for _ in range(STEPS)]


LLAMA_VOCAB = 128
LLAMA_SEQ = 8


def make_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=LLAMA_VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=False, attention_dropout=0.0)
    # "sdpa" is transformers' default; named so that a change of default does not change the test.
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    model.train()
    return model


def llama_data():
    g = torch.Generator().manual_seed(3)
    # TP: every rank sees the same (global) batch; a small batch keeps the step cheap.
    return [torch.randint(0, LLAMA_VOCAB, (2, LLAMA_SEQ), generator=g) for _ in range(STEPS)]


def sgd(params, lr=0.1):
    # foreach=False: TP models mix DTensor and plain parameters; the per-tensor path is the same math.
    return torch.optim.SGD(params, lr=lr, momentum=0.9, foreach=False)


# --------------------------------------------------------------------------------------------------------
# References (single process, CPU, float32, full global batch)


def reference_mse(model, data):
    opt = sgd(model.parameters())
    losses = []
    for x, y in data:
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, full_params(model)


def reference_mlp(data):
    return reference_mse(make_mlp(), data)


def reference_tp_mlp(data):
    return reference_mse(make_tp_mlp(), data)


def reference_llama(data):
    model = make_llama()
    opt = sgd(model.parameters(), lr=0.05)
    losses = []
    for ids in data:
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, full_params(model)


# --------------------------------------------------------------------------------------------------------
# Distributed runs


def train_dp(model, opt, data, fwd=None):
    """Data parallel loop: this rank's shard of every global batch."""
    fwd = model if fwd is None else fwd
    losses = []
    for x, y in data:
        x, y = shard(x).to(DEVICE), shard(y).to(DEVICE)
        loss = F.mse_loss(fwd(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(global_mean(loss))
    return losses


def run_ddp(compile=False):
    from torch.nn.parallel import DistributedDataParallel as DDP

    data = mlp_data()
    ref = reference_mlp(data)
    model = DDP(make_mlp().to(DEVICE))
    opt = sgd(model.parameters())
    fwd = compiled(model) if compile else model
    losses = train_dp(model, opt, data, fwd)
    return (losses, full_params(model)), ref, TOL, compiled_summary() if compile else ""


def run_accelerate():
    """Accelerate's own data-parallel path: Accelerator() under torchrun sees a multi-process "tpu" run, puts
    each process on its tpu:LOCAL_RANK and wraps the model in DDP (the CPU run: MULTI_CPU, gloo)."""
    from accelerate import Accelerator
    from torch.nn.parallel import DistributedDataParallel as DDP

    data = mlp_data()
    ref = reference_mlp(data)
    accelerator = Accelerator(cpu=DEVICE_KIND == "cpu")
    want = "MULTI_TPU" if DEVICE_KIND == "tpu" else "MULTI_CPU"
    state = accelerator.state
    device = accelerator.device
    same_device = device.type == DEVICE.type and (DEVICE.index is None or device.index == DEVICE.index)
    if state.distributed_type.name != want or accelerator.num_processes != WORLD or not same_device:
        raise Mismatch(f"Accelerator sees {state.distributed_type.name}, {accelerator.num_processes} processes, device "
                       f"{accelerator.device}; expected {want}, {WORLD}, {DEVICE}")
    model = accelerator.prepare(make_mlp())
    opt = sgd(model.parameters())
    if not isinstance(model, DDP):
        raise Mismatch(f"Accelerator.prepare gave a {type(model).__name__}, not DDP")
    losses = []
    for x, y in data:
        x, y = shard(x).to(accelerator.device), shard(y).to(accelerator.device)
        loss = F.mse_loss(model(x), y)
        accelerator.backward(loss)
        opt.step()
        opt.zero_grad()
        losses.append(accelerator.gather(loss.detach()[None]).mean().item())
    accelerator.wait_for_everyone()
    return (losses, full_params(model)), ref, TOL, f" distributed_type={state.distributed_type.name}"


def fsdp_mlp(mp_policy=None, compile=False):
    """The MLP with fully_shard on every Linear (reshard_after_forward=True), then on the root.

    compile: FSDP2's hooks are torch._dynamo.disable'd (torch 2.13 has no switch to trace them), so
    torch.compile of the whole FSDP2 model graph-breaks at every hook and, with every layer an FSDP module,
    compiles nothing. The supported pattern (torchtitan's) compiles each layer first and applies fully_shard
    to the compiled module: the hooks (all-gather, reshard, reduce-scatter) run eagerly around the compiled
    forward, and the backward runs through AOTAutograd's compiled backward."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(DEVICE.type, (WORLD,))
    model = make_mlp().to(DEVICE)
    kw = dict(mesh=mesh, reshard_after_forward=True, mp_policy=mp_policy or MixedPrecisionPolicy())
    if compile:
        reset_compiled()
    for i, layer in enumerate(model.net):
        if isinstance(layer, nn.Linear):
            if compile:
                layer = torch.compile(layer, backend=compile_backend(), fullgraph=True)
                model.net[i] = layer
            fully_shard(layer, **kw)
    fully_shard(model, **kw)
    require_sharded(model, 6)  # every weight and bias, Shard(0)
    return model


def run_fsdp(compile=False):
    data = mlp_data()
    ref = reference_mlp(data)
    model = fsdp_mlp(compile=compile)
    opt = sgd(model.parameters())
    losses = train_dp(model, opt, data)
    return (losses, full_params(model)), ref, TOL, compiled_summary() if compile else ""


def reference_bf16(data, microbatches):
    """FSDP2's MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) emulated on the CPU in one process:
    float32 master parameters; each step, per data-parallel shard (microbatches=WORLD) or on the whole batch
    (microbatches=1): a bfloat16 copy of the parameters, the input cast to bfloat16 (cast_forward_inputs),
    forward and backward in bfloat16, the bfloat16 gradients cast to float32 and averaged over the shards (the
    float32 reduce-scatter), the optimizer step on the float32 masters."""
    master = make_mlp()
    opt = sgd(master.parameters())
    losses = []
    for x, y in data:
        n = x.shape[0] // microbatches
        grads = [torch.zeros_like(p) for p in master.parameters()]
        step_loss = 0.0
        for m in range(microbatches):
            low = copy.deepcopy(master).to(torch.bfloat16)
            xm, ym = x[m * n:(m + 1) * n], y[m * n:(m + 1) * n]
            loss = F.mse_loss(low(xm.to(torch.bfloat16)).float(), ym)
            loss.backward()
            for g, p in zip(grads, low.parameters()):
                g.add_(p.grad.float())
            step_loss += loss.item()
        for p, g in zip(master.parameters(), grads):
            p.grad = g / microbatches
        opt.step()
        opt.zero_grad()
        losses.append(step_loss / microbatches)
    return losses, full_params(master)


def run_fsdp_mp():
    """FSDP2 with bfloat16 parameters and float32 gradient reduction.

    Reference: reference_bf16 with one microbatch per rank, i.e. the same bfloat16 roundings at the same
    places on the same rows (the ranks' shards); only the float32 average of the two shard gradients
    ((a + b) / 2, exact up to one float32 rounding) and the float32 loss mean can differ. On "cpu" both sides
    run the same ATen bfloat16 kernels on the same shapes, so the float32 rule (1e-5) applies.

    On "tpu" the bfloat16 products and sums come from XLA's kernels, whose accumulation order and
    intermediate precision may differ from ATen's; one flipped bfloat16 rounding is a relative change of
    2^-8 = 3.9e-3 of that value, far above 1e-5. The tolerance there is therefore the bfloat16 noise floor
    measured in the same run: the largest difference between the reference and other legitimate bfloat16
    emulations of this training (the whole batch at once, and 2*WORLD microbatches, which round the gradient
    sums over rows differently), times 4, and at least 1e-5. Measured at world size 2: the noise floor is
    7.9e-4 (so the tolerance 3.2e-3); the same emulation with its bfloat16 work on "tpu" (CPU plugin, one
    process) differs from the CPU one by 5.7e-4 in the parameters and 1.7e-4 in the losses, inside it. Real
    errors are far outside: gradients summed instead of averaged move the parameters by 0.12 and the losses
    by 0.09, halved gradients by 0.11 / 0.04, training on one rank's shard only by 0.27 / 0.61 (measured
    against this reference). The float32 reference's own distance is printed as fp32_ref_diff (5.9e-4: bf16
    rounding changes the run by about as much as the noise floor, so a forward left in float32 is caught by
    the explicit dtype checks below, not by the numbers)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    data = mlp_data()
    ref = reference_bf16(data, WORLD)
    model = fsdp_mlp(MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))
    opt = sgd(model.parameters())
    losses = []
    for x, y in data:
        x, y = shard(x).to(DEVICE), shard(y).to(DEVICE)
        out = model(x)
        if out.dtype != torch.bfloat16:
            raise Mismatch(f"fsdp_mp: the forward ran in {out.dtype}, not bfloat16")
        loss = F.mse_loss(out.float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(global_mean(loss))
    params = full_params(model)
    for name, p in model.named_parameters():
        if p.dtype != torch.float32:
            raise Mismatch(f"fsdp_mp: sharded parameter {name} is {p.dtype}, not the float32 master")
    alternatives = [m for m in (1, 2 * WORLD) if m != WORLD and GLOBAL_BATCH % m == 0]
    noise = max(max(max_diffs(reference_bf16(data, m), ref)) for m in alternatives)
    tol = TOL if DEVICE_KIND == "cpu" else max(TOL, 4 * noise)
    extra = f" bf16_noise={noise:.3g} tol={tol:.3g}"
    fp32 = reference_mlp(data)
    extra += f" fp32_ref_diff={max(max_diffs(fp32, ref)):.3g}"
    return (losses, params), ref, tol, extra


def tp_mesh():
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(DEVICE.type, (WORLD,))


def run_tp_mlp(compile=False):
    """compile: the whole TP model under torch.compile; its graphs hold DTensor's collectives (the forward's
    all-reduce of the row-parallel partial products, the backward's of the column-parallel input gradient),
    which run through the device's backend between the graph's lowered pieces."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    data = tp_mlp_data()
    ref = reference_tp_mlp(data)
    model = make_tp_mlp().to(DEVICE)
    # up: weight rows sharded, output Shard(-1) kept local; down: weight columns sharded, the partial products
    # all-reduced to a replicated output; head stays an ordinary (replicated) layer.
    parallelize_module(model, tp_mesh(), {"up": ColwiseParallel(), "down": RowwiseParallel()})
    require_sharded(model, 3)  # up.weight, up.bias, down.weight (down.bias is a replicated DTensor)
    opt = sgd(model.parameters())
    fwd = compiled(model) if compile else model
    splits = split_pieces()
    losses = []
    for x, y in data:
        x, y = x.to(DEVICE), y.to(DEVICE)  # TP: every rank gets the whole batch
        loss = F.mse_loss(fwd(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    if compile and DEVICE_KIND == "tpu" and split_pieces() == splits:
        raise Mismatch("the compiled TP graphs were not lowered in pieces around their collectives")
    return (losses, full_params(model)), ref, TOL, compiled_summary() if compile else ""


def run_tp_llama():
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    data = llama_data()
    ref = reference_llama(data)
    model = make_llama().to(DEVICE)
    mesh = tp_mesh()
    # Local outputs (use_local_output=True, the default): q/k/v give each rank its own heads as a plain
    # tensor. transformers 5.24's LlamaAttention reshapes with (*input_shape, -1, head_dim), so it infers the
    # local head count (4 / 2 query heads, 2 / 2 key-value heads; num_key_value_groups stays 2), runs
    # attention on its heads and o_proj (rowwise) sums the ranks' partial products. Nothing in the attention
    # module reads num_heads for shapes, so no attribute is changed. The same holds for the MLP
    # (gate/up colwise, down rowwise). Embeddings, norms and lm_head stay replicated: every rank computes
    # them on the same batch, and the colwise layers' backward all-reduces the gradient of their input.
    plan = {"self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(), "self_attn.o_proj": RowwiseParallel(),
            "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(),
            "mlp.down_proj": RowwiseParallel()}
    for layer in model.model.layers:
        parallelize_module(layer, mesh, plan)
    require_sharded(model, 7 * len(model.model.layers))  # the 7 projection weights per layer (no biases)
    opt = sgd(model.parameters(), lr=0.05)
    losses = []
    for ids in data:
        ids = ids.to(DEVICE)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return (losses, full_params(model)), ref


SCENARIOS = {
    "ddp": run_ddp,
    "accelerate": run_accelerate,
    "fsdp": run_fsdp,
    "fsdp_mp": run_fsdp_mp,
    "tp_mlp": run_tp_mlp,
    "tp_llama": run_tp_llama,
    "ddp_compile": lambda: run_ddp(compile=True),
    "tp_compile": lambda: run_tp_mlp(compile=True),
    "fsdp_compile": lambda: run_fsdp(compile=True),
}


# --------------------------------------------------------------------------------------------------------
# Comparison


def norm_diff(a, b):
    """|a - b| / max(1, |b|), elementwise (b: the reference)."""
    return (a - b).abs() / b.abs().clamp(min=1.0)


def max_diffs(got, ref):
    (gl, gp), (rl, rp) = got, ref
    if len(gl) != len(rl):
        raise Mismatch(f"{len(gl)} losses against {len(rl)} in the reference")
    if set(gp) != set(rp):
        raise Mismatch(f"parameter names differ: {sorted(set(gp) ^ set(rp))}")
    ld = norm_diff(torch.tensor(gl, dtype=torch.float64), torch.tensor(rl, dtype=torch.float64))
    pd = 0.0
    for name in rp:
        if gp[name].shape != rp[name].shape:
            raise Mismatch(f"parameter {name}: shape {tuple(gp[name].shape)} against {tuple(rp[name].shape)}")
        pd = max(pd, norm_diff(gp[name].double(), rp[name].double()).max().item())
    return ld.max().item(), pd


def report(name, got, ref, tol):
    (gl, gp), (rl, rp) = got, ref
    lines = []
    for i, (a, b) in enumerate(zip(gl, rl)):
        if norm_diff(torch.tensor(a), torch.tensor(b)).item() > tol:
            lines.append(f"  step {i}: loss {a!r} reference {b!r}")
    for n in rp:
        d = norm_diff(gp[n].double(), rp[n].double())
        if d.max().item() > tol:
            i = int(d.flatten().argmax())
            lines.append(f"  param {n}: max diff {d.max().item():.3g} at flat index {i} "
                         f"({gp[n].flatten()[i].item()!r} vs {rp[n].flatten()[i].item()!r})")
    return f"rank {RANK} {name}:\n" + "\n".join(lines[:20])


def run_scenario(name):
    t0 = time.perf_counter()
    tol, extra = TOL, ""
    try:
        # A Mismatch raised by the scenario itself (a wrong dtype, nothing compiled) is a FAIL like a numeric
        # one; the scenarios raise it at points that every rank reaches alike.
        result = SCENARIOS[name]()
        got, ref = result[0], result[1]
        tol = result[2] if len(result) > 2 else TOL
        extra = result[3] if len(result) > 3 else ""
        ld, pd = max_diffs(got, ref)
        detail = None if max(ld, pd) <= tol else report(name, got, ref, tol)
    except Mismatch as e:
        ld = pd = float("inf")
        detail = f"rank {RANK} {name}: {e}"
    # Every rank learns the worst difference of all ranks, so all agree on OK/FAIL and stay in step.
    worst = torch.tensor([ld, pd], dtype=torch.float64)
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    ld, pd = worst.tolist()
    dt = time.perf_counter() - t0
    ok = max(ld, pd) <= tol
    if detail:
        print(detail, file=sys.stderr, flush=True)
    if RANK == 0:
        tag = "OK" if ok else "FAIL"
        print(f"{tag} {name} max_loss_diff={ld:.3g} max_param_diff={pd:.3g} time={dt:.2f}s{extra}"
              + ("" if ok else f" tolerance={tol:.3g}"), flush=True)
    dist.barrier()
    return ok


def main(argv):
    names = argv or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        sys.exit(f"train_worker: unknown scenario(s) {unknown}; known: {list(SCENARIOS)}")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    init()
    if RANK == 0:
        print(f"train_worker: device {DEVICE_KIND} ({DEVICE}), backend {dist.get_backend()}, world {WORLD}",
              flush=True)
    failed = []
    for name in names:
        try:
            if not run_scenario(name):
                failed.append(name)
        except Exception:
            print(f"ERROR {name} on rank {RANK}:\n{traceback.format_exc()}", file=sys.stderr, flush=True)
            if RANK == 0:
                print(f"ERROR {name}", flush=True)
            sys.stdout.flush()
            os._exit(2)  # the other rank may wait in a collective: let torchrun stop it
    dist.destroy_process_group()
    if failed:
        print(f"train_worker: rank {RANK}: mismatch in {failed}", file=sys.stderr, flush=True)
    finish(1 if failed else 0)


if __name__ == "__main__":
    main(sys.argv[1:])
