"""Hugging Face sharded models across 2 processes, checked against the unsharded model on the CPU.

Run under torchrun (one process per rank):

    DIST_DEVICE=tpu python -m torch.distributed.run --standalone --nproc_per_node=2 \\
        tests/python/distributed/hf_worker.py qwen3_tp qwen3_moe_tp flux_tp flux_cp

DIST_DEVICE selects the device the sharded models run on:
  tpu (default): `import torch_pjrt`, `init_process_group("cpu:gloo,tpu:tpu_dist")`;
  cpu:           `init_process_group("gloo")`, torch_pjrt not loaded (TORCH_DEVICE_BACKEND_AUTOLOAD=0), so the
                 accelerator that Transformers and Diffusers detect is the CPU. This proves the scenarios
                 themselves without torch-pjrt.

Scenarios (any subset, run in the given order in one process group):
  qwen3_tp      tiny Qwen3ForCausalLM, from_pretrained(tp_plan="auto"), greedy generate(max_new_tokens=8)
  qwen3_moe_tp  tiny Qwen3MoeForCausalLM (4 experts, top-2), the same; experts sharded by the model's tp plan
  flux_tp       tiny FluxTransformer2DModel, enable_parallelism(TensorParallelConfig(tp_degree=2)), one forward
  flux_cp       the same with ContextParallelConfig(ulysses_degree=2)

The reference is the same weights, unsharded, in this process on the CPU. Each scenario prints
`OK <scenario> ...` on rank 0 with the measured differences; a mismatch raises (non-zero exit) on the rank that
saw it, naming the scenario and the difference. Nothing is downloaded: models are built from configs with a fixed
seed, saved to a temporary folder shared by the ranks and loaded back.
"""

import os
import sys

DEVICE = os.environ.get("DIST_DEVICE", "tpu")
if DEVICE not in ("cpu", "tpu"):
    sys.exit(f"hf_worker: DIST_DEVICE must be 'cpu' or 'tpu', not {DEVICE!r}")
if DEVICE == "cpu":
    # With torch_pjrt installed, `import torch` loads it and the detected accelerator becomes "tpu".
    os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")

import contextlib  # noqa: E402
import copy  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from unittest import mock  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from teardown import finish  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

if DEVICE == "tpu":
    import torch_pjrt  # noqa: E402, F401

warnings.filterwarnings("ignore")

# Logits and outputs of the sharded models differ from the unsharded ones by float32 rounding only (the partial
# products are summed in another order).
TOL = float(os.environ.get("HF_WORKER_TOL", "1e-4"))
RANK = 0
WORLD = 1


class Mismatch(AssertionError):
    pass


def log(msg):
    if RANK == 0:
        print(msg, flush=True)


def max_diff(a, b):
    return (a.detach().float().cpu() - b.detach().float().cpu()).abs().max().item()


class CommCounter(TorchDispatchMode):
    """Counts the collectives (c10d and functional c10d ops) dispatched while active."""

    def __init__(self):
        super().__init__()
        self.counts = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        ns = func.namespace
        if ns in ("c10d", "_c10d_functional", "_c10d_functional_autograd", "_dtensor") and \
                func._opname != "_wrap_tensor_autograd":
            key = f"{ns.replace('_c10d_functional', 'f')}.{func._opname}"
            self.counts[key] = self.counts.get(key, 0) + 1
        return func(*args, **(kwargs or {}))

    def __str__(self):
        return ",".join(f"{k}={v}" for k, v in sorted(self.counts.items())) or "none"


def shared_tmpdir():
    """A folder made by rank 0, its path sent to every rank."""
    path = [tempfile.mkdtemp(prefix="hf_worker_") if RANK == 0 else None]
    dist.broadcast_object_list(path, src=0)
    return path[0]


def accelerator_type():
    return torch._C._get_accelerator().type


# ---------------------------------------------------------------------------------------------------- Transformers

PROMPT = [[3, 17, 42, 99, 7, 64, 120, 5]]


def qwen3_config(moe):
    if moe:
        from transformers import Qwen3MoeConfig

        return Qwen3MoeConfig(
            vocab_size=128, hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=4, num_experts_per_tok=2,
            decoder_sparse_step=1, norm_topk_prob=True, max_position_embeddings=64, tie_word_embeddings=False,
            pad_token_id=0, bos_token_id=1, eos_token_id=2,
        )
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=64, tie_word_embeddings=False,
        pad_token_id=0, bos_token_id=1, eos_token_id=2,
    )


def run_qwen3(name, moe):
    from transformers import AutoModelForCausalLM

    path = shared_tmpdir()
    try:
        if RANK == 0:
            cls = AutoModelForCausalLM
            torch.manual_seed(1234)
            model = cls.from_config(qwen3_config(moe), dtype=torch.float32)
            model.save_pretrained(path)
            del model
        dist.barrier()

        ids = torch.tensor(PROMPT)
        gen = dict(max_new_tokens=8, do_sample=False, pad_token_id=0, eos_token_id=None)

        # Reference: unsharded, this process, CPU.
        ref = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        with torch.no_grad():
            ref_logits = ref(ids).logits
            ref_tokens = ref.generate(ids, attention_mask=torch.ones_like(ids), **gen)
        del ref

        # Sharded: Transformers picks the device (torch._C._get_accelerator()) and builds the mesh itself;
        # tp_plan and device_map are mutually exclusive in 5.24.
        t0 = time.perf_counter()
        with CommCounter() as load_comms:
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, tp_plan="auto").eval()
        load_s = time.perf_counter() - t0
        dev = model.device
        if dev.type != accelerator_type():
            raise Mismatch(f"{name}: model on {dev}, expected device type {accelerator_type()}")
        mesh = model._device_mesh
        sharded = [n for n, p in model.named_parameters() if isinstance(p, torch.distributed.tensor.DTensor)
                   and any(pl.is_shard() for pl in p.placements)]
        if moe:
            experts = [n for n in sharded if ".mlp.experts." in n]
            if not experts:
                raise Mismatch(f"{name}: the tp plan sharded no expert weights (sharded: {sharded})")
            e = model.get_parameter(experts[0])
            expert_info = f" {experts[0]}: {tuple(e.shape)} local {tuple(e.to_local().shape)} {e.placements}"
        else:
            expert_info = ""
        x = ids.to(dev)
        mode = CommCounter()
        t0 = time.perf_counter()
        with torch.no_grad(), mode:
            logits = model(x).logits
            tokens = model.generate(x, attention_mask=torch.ones_like(x), **gen)
        run_s = time.perf_counter() - t0
        if logits.device.type != dev.type or tokens.device.type != dev.type:
            raise Mismatch(f"{name}: outputs on {logits.device}/{tokens.device}, expected {dev.type}")
        d = max_diff(logits, ref_logits)
        got, want = tokens.cpu().tolist(), ref_tokens.tolist()
        if got != want:
            raise Mismatch(f"{name} (rank {RANK}): sharded tokens {got} != unsharded CPU tokens {want} "
                           f"(logits max|diff| {d:.3g})")
        if not d <= TOL:
            raise Mismatch(f"{name} (rank {RANK}): logits max|diff| {d:.3g} > {TOL}")
        log(f"OK {name} device={dev} mesh={tuple(mesh.mesh.shape)}:{mesh.device_type} sharded_params={len(sharded)}/{len(list(model.parameters()))}{expert_info} "
            f"tokens={got[0][len(PROMPT[0]):]} logits_max_diff={d:.3g} load={load_s:.2f}s generate={run_s:.2f}s "
            f"load_comms[{load_comms}] run_comms[{mode}]")
        del model
    finally:
        dist.barrier()
        if RANK == 0:
            shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------------------------------------------- Diffusers

def flux_inputs():
    g = torch.Generator().manual_seed(7)
    return dict(
        hidden_states=torch.randn(1, 16, 4, generator=g),            # 4x4 latent, patch 1: 16 image tokens
        encoder_hidden_states=torch.randn(1, 8, 32, generator=g),    # 8 text tokens
        pooled_projections=torch.randn(1, 32, generator=g),
        timestep=torch.tensor([0.5]),
        img_ids=torch.stack(torch.meshgrid(torch.zeros(1), torch.arange(4.0), torch.arange(4.0), indexing="ij"),
                            -1).reshape(16, 3),
        txt_ids=torch.zeros(8, 3),
    )


def run_flux(name, mode_name):
    import diffusers
    from diffusers import ContextParallelConfig, FluxTransformer2DModel, ParallelConfig, TensorParallelConfig

    patches = contextlib.ExitStack()
    if DEVICE == "cpu":
        # Two things keep Diffusers 0.42's enable_parallelism off a CPU-only machine, both outside what is tested
        # here: `_resolve_parallel_config` computes `rank % torch.accelerator.device_count()` (0 without an
        # accelerator: ZeroDivisionError), and `apply_tensor_parallel` accepts only the device types in
        # hooks/tensor_parallel.py `_SUPPORTED_TP_DEVICES` (cuda, neuron, tpu, xpu). The CPU proof run lifts both;
        # the "tpu" run needs neither.
        import diffusers.hooks.tensor_parallel as htp

        patches.enter_context(mock.patch.object(torch.accelerator, "device_count", lambda: 1))
        patches.enter_context(mock.patch.object(htp, "_SUPPORTED_TP_DEVICES", (*htp._SUPPORTED_TP_DEVICES, "cpu")))

    path = shared_tmpdir()
    try:
        if RANK == 0:
            torch.manual_seed(4321)
            model = FluxTransformer2DModel(
                patch_size=1, in_channels=4, num_layers=1, num_single_layers=1, attention_head_dim=16,
                num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=32, guidance_embeds=False,
                axes_dims_rope=(4, 4, 8),
            )
            model.save_pretrained(path)
            del model
        dist.barrier()

        inputs = flux_inputs()
        ref = FluxTransformer2DModel.from_pretrained(path, torch_dtype=torch.float32).eval()
        with torch.no_grad():
            want = ref(**inputs, return_dict=False)[0]

        dev_type = accelerator_type()
        # The device enable_parallelism records: f"{accelerator}:{rank % device count}" (tpu:0 with one device per
        # process).
        dev = torch.device("cpu") if dev_type == "cpu" else torch.device(
            dev_type, RANK % torch.accelerator.device_count())
        model = copy.deepcopy(ref).to(dev)
        del ref
        if mode_name == "tp":
            cfg = ParallelConfig(tensor_parallel_config=TensorParallelConfig(tp_degree=WORLD))
        else:
            cfg = ParallelConfig(context_parallel_config=ContextParallelConfig(ulysses_degree=WORLD))
        t0 = time.perf_counter()
        with patches, CommCounter() as setup_comms:
            model.enable_parallelism(config=cfg)
        setup_s = time.perf_counter() - t0
        mesh = model._parallel_config._mesh
        dinputs = {k: v.to(dev) for k, v in inputs.items()}
        mode = CommCounter()
        t0 = time.perf_counter()
        with torch.no_grad(), mode:
            out = model(**dinputs, return_dict=False)[0]
        run_s = time.perf_counter() - t0
        if isinstance(out, torch.distributed.tensor.DTensor):
            out = out.full_tensor()
        if out.device.type != dev_type:
            raise Mismatch(f"{name}: output on {out.device}, expected {dev_type}")
        if out.shape != want.shape:
            raise Mismatch(f"{name} (rank {RANK}): output shape {tuple(out.shape)} != {tuple(want.shape)}")
        d = max_diff(out, want)
        if not d <= TOL:
            raise Mismatch(f"{name} (rank {RANK}): output max|diff| {d:.3g} > {TOL} against the unsharded CPU forward")
        log(f"OK {name} diffusers={diffusers.__version__} device={dev} mesh={tuple(mesh.mesh.shape)}:{mesh.device_type}"
            f" out={tuple(out.shape)} max_diff={d:.3g} enable_parallelism={setup_s:.2f}s forward={run_s:.2f}s "
            f"setup_comms[{setup_comms}] run_comms[{mode}]")
        del model
    finally:
        dist.barrier()
        if RANK == 0:
            shutil.rmtree(path, ignore_errors=True)


SCENARIOS = {
    "qwen3_tp": lambda: run_qwen3("qwen3_tp", moe=False),
    "qwen3_moe_tp": lambda: run_qwen3("qwen3_moe_tp", moe=True),
    "flux_tp": lambda: run_flux("flux_tp", "tp"),
    "flux_cp": lambda: run_flux("flux_cp", "cp"),
}


def main(argv):
    global RANK, WORLD
    names = argv or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        sys.exit(f"hf_worker: unknown scenario(s) {unknown}; known: {list(SCENARIOS)}")
    if "RANK" not in os.environ:
        sys.exit("hf_worker: run me under `python -m torch.distributed.run --nproc_per_node=2`")

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    backend = "cpu:gloo,tpu:tpu_dist" if DEVICE == "tpu" else "gloo"
    if DEVICE == "tpu" and "tpu_dist" not in dist.Backend.backend_list:
        sys.exit("hf_worker: no c10d backend 'tpu_dist' is registered after `import torch_pjrt` "
                 f"(registered: {dist.Backend.backend_list})")
    dist.init_process_group(backend)
    RANK, WORLD = dist.get_rank(), dist.get_world_size()
    if WORLD != 2:
        sys.exit(f"hf_worker: needs 2 processes, got {WORLD}")
    acc = accelerator_type()
    if acc != DEVICE:
        sys.exit(f"hf_worker: DIST_DEVICE={DEVICE} but the detected accelerator is {acc!r}"
                 + (" (is torch_pjrt built and installed?)" if DEVICE == "tpu" else ""))
    log(f"hf_worker: device={DEVICE} backend={backend} world={WORLD} torch={torch.__version__}")
    try:
        for n in names:
            t0 = time.perf_counter()
            try:
                SCENARIOS[n]()
            except Mismatch as e:
                print(f"FAIL {e}", file=sys.stderr, flush=True)
                os._exit(1)  # the other rank may be waiting in a collective: do not wait for it
            log(f"   {n}: {time.perf_counter() - t0:.2f}s")
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    finish(0)


if __name__ == "__main__":
    main(sys.argv[1:])
