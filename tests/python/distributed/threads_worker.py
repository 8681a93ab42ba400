"""Ranks as threads of one process, each on its own device of the CPU plugin (TORCH_PJRT_CPU_DEVICES=N): the
world where every rank of a group drives a device of this client, so tpu_dist runs collectives as programs
(its program transport) where it can, and through the host where it cannot (PREMUL_SUM, uneven splits).

Run as a plain script (tests/python/test_distributed_programs.py does, with TORCH_PJRT_CPU_DEVICES=2). It uses
torch's threaded world (a thread-local c10d world, torch.testing's multi_threaded_pg) and prints
`OK <check> ...` per check, every result compared with the value computed on the CPU from the same inputs.
"""

import datetime
import os
import sys
import threading

import torch
import torch.distributed as dist
import torch.nn as nn
from torch._C._distributed_c10d import HashStore
from torch.testing._internal.distributed.multi_threaded_pg import _install_threaded_pg

import torch_pjrt

N = 2
lock = threading.Lock()
results = {}  # check -> list of per-rank failures


def inputs(rank, shape, dtype, seed):
    g = torch.Generator().manual_seed(seed * 10 + rank)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(-50, 50, shape, generator=g).to(dtype)


def check(name, rank, got, want):
    ok = got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)
    with lock:
        results.setdefault(name, []).extend([] if ok else [f"rank {rank}: got {got.tolist()}, want {want.tolist()}"])


def reduce_cpu(xs, op):
    if op == dist.ReduceOp.SUM:
        return torch.stack(xs).sum(0).to(xs[0].dtype) if xs[0].dtype != torch.bool else torch.stack(xs).any(0)
    if op == dist.ReduceOp.MAX:
        return torch.stack(xs).amax(0) if xs[0].dtype != torch.bool else torch.stack(xs).any(0)
    if op == dist.ReduceOp.MIN:
        return torch.stack(xs).amin(0) if xs[0].dtype != torch.bool else torch.stack(xs).all(0)
    if op == dist.ReduceOp.PRODUCT:
        return torch.stack(xs).prod(0).to(xs[0].dtype)
    if op == dist.ReduceOp.BXOR:
        out = xs[0].clone()
        for x in xs[1:]:
            out ^= x
        return out
    if op == dist.ReduceOp.AVG:
        s = torch.stack(xs).sum(0).to(xs[0].dtype)
        return s / N if s.dtype.is_floating_point else torch.div(s, N, rounding_mode="trunc")
    raise AssertionError(op)


def collectives(rank, dev):
    # all_reduce: ops x dtypes, as programs
    cases = [(op, dt) for dt in (torch.float32, torch.bfloat16, torch.int32, torch.int64) for op in
             (dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.MIN, dist.ReduceOp.PRODUCT)]
    cases += [(dist.ReduceOp.SUM, torch.bool), (dist.ReduceOp.MAX, torch.bool), (dist.ReduceOp.BXOR, torch.int32),
              (dist.ReduceOp.AVG, torch.float32), (dist.ReduceOp.AVG, torch.int64), (dist.ReduceOp.SUM, torch.complex64)]
    for i, (op, dt) in enumerate(cases):
        xs = [inputs(r, (3, 4), dt, i) for r in range(N)]
        t = xs[rank].to(dev)
        dist.all_reduce(t, op=op)
        check(f"all_reduce_{op}_{dt}".replace("torch.", "").replace("RedOpType.", ""), rank, t.cpu(), reduce_cpu(xs, op))
    # a view: only its elements of the base change
    base = inputs(rank, (4, 6), torch.float32, 100).to(dev)
    others = [inputs(r, (4, 6), torch.float32, 100) for r in range(N)]
    view = base[1:3, ::2]
    dist.all_reduce(view)
    want = others[rank].clone()
    want[1:3, ::2] = sum(o[1:3, ::2] for o in others)
    check("all_reduce_view", rank, base.cpu(), want)
    # broadcast from rank 1
    xs = [inputs(r, (5,), torch.float32, 200) for r in range(N)]
    t = xs[rank].to(dev)
    dist.broadcast(t, 1)
    check("broadcast", rank, t.cpu(), xs[1])
    # all_gather_into_tensor, concatenated and stacked outputs, a transposed input
    xs = [inputs(r, (2, 3), torch.float32, 300) for r in range(N)]
    out = torch.empty(N * 2, 3, device=dev)
    dist.all_gather_into_tensor(out, xs[rank].to(dev))
    check("all_gather_into_tensor", rank, out.cpu(), torch.cat(xs))
    out = torch.empty(N, 3, 2, device=dev)
    dist.all_gather_into_tensor(out, xs[rank].to(dev).t())
    check("all_gather_into_tensor_stacked_transposed", rank, out.cpu(), torch.stack([x.t() for x in xs]))
    # reduce_scatter_tensor SUM and AVG
    for op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG):
        xs = [inputs(r, (N * 2, 3), torch.float32, 400) for r in range(N)]
        out = torch.empty(2, 3, device=dev)
        dist.reduce_scatter_tensor(out, xs[rank].to(dev), op=op)
        check(f"reduce_scatter_tensor_{op}".replace("RedOpType.", ""), rank, out.cpu(),
              reduce_cpu(xs, op)[rank * 2:(rank + 1) * 2])
    # all_to_all_single, equal splits (program) and uneven ones (host)
    xs = [inputs(r, (N * 2, 3), torch.int64, 500) for r in range(N)]
    out = torch.empty(N * 2, 3, dtype=torch.int64, device=dev)
    dist.all_to_all_single(out, xs[rank].to(dev))
    check("all_to_all_single", rank, out.cpu(), torch.cat([x[rank * 2:(rank + 1) * 2] for x in xs]))
    in_splits = [[1, 2], [3, 1]][rank]  # rank r sends in_splits[j] rows to rank j
    out_splits = [[1, 3], [2, 1]][rank]
    xs = [inputs(r, (sum([[1, 2], [3, 1]][r]), 3), torch.float32, 600) for r in range(N)]
    out = torch.empty(sum(out_splits), 3, device=dev)
    dist.all_to_all_single(out, xs[rank].to(dev), out_splits, in_splits)
    want = torch.cat([x.split([[1, 2], [3, 1]][r])[rank] for r, x in enumerate(xs)])
    check("all_to_all_single_uneven_host", rank, out.cpu(), want)
    # PREMUL_SUM has no program form: the host transport
    xs = [inputs(r, (3,), torch.float32, 700) for r in range(N)]
    t = xs[rank].to(dev)
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
    want = sum(x * 0.5 for x in xs)
    with lock:
        if not torch.allclose(t.cpu(), want):
            results.setdefault("premul_sum_host", []).append(f"rank {rank}: {t.cpu().tolist()} != {want.tolist()}")
        else:
            results.setdefault("premul_sum_host", [])


def ddp(rank, dev):
    """DDP over the program transport, 5 SGD steps, against the same training on the CPU."""
    with lock:  # the ranks are threads of one process: seeding and drawing the weights must not interleave
        torch.manual_seed(0)
        ref = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))
    model.load_state_dict(ref.state_dict())
    model = nn.parallel.DistributedDataParallel(model.to(dev))
    opt, ref_opt = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(ref.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    worst = 0.0
    for _ in range(5):
        x, y = torch.randn(2 * N, 8, generator=g), torch.randn(2 * N, 2, generator=g)
        opt.zero_grad()
        nn.functional.mse_loss(model(x[rank::N].to(dev)), y[rank::N].to(dev)).backward()
        opt.step()
        ref_opt.zero_grad()
        torch.stack([nn.functional.mse_loss(ref(x[r::N]), y[r::N]) for r in range(N)]).mean().backward()
        ref_opt.step()
    for p, q in zip(model.module.parameters(), ref.parameters()):
        worst = max(worst, (p.detach().cpu() - q.detach()).abs().max().item())
    with lock:
        results.setdefault("ddp", []).extend([] if worst <= 1e-5 else [f"rank {rank}: parameters differ by {worst}"])


def body(rank, store, errors):
    try:
        torch.tpu.set_device(rank)
        dist.init_process_group("tpu_dist", store=store, rank=rank, world_size=N,
                                timeout=datetime.timedelta(seconds=60))
        transport = torch_pjrt.distributed.transport()
        if transport != "programs":
            raise RuntimeError(f"rank {rank}: transport {transport}, expected programs")
        dev = torch.device("tpu", rank)
        collectives(rank, dev)
        ddp(rank, dev)
        dist.destroy_process_group()
    except BaseException as e:  # noqa: BLE001 - reported by the main thread
        import traceback

        errors.append(f"rank {rank}: {traceback.format_exc()}")


def main():
    if torch.tpu.device_count() < N:
        sys.exit(f"threads_worker: needs TORCH_PJRT_CPU_DEVICES={N} (device count {torch.tpu.device_count()})")
    _install_threaded_pg()
    torch._C._distributed_c10d._set_thread_isolation_mode(True)  # a group registry per thread
    store, errors = HashStore(), []
    before = torch_pjrt.metrics()["distributed"]
    threads = [threading.Thread(target=body, args=(r, store, errors)) for r in range(N)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    if any(t.is_alive() for t in threads):
        print("FAIL: a rank's thread hangs", flush=True)
        os._exit(1)
    if errors:
        print("FAIL:\n" + "\n".join(errors), flush=True)
        os._exit(1)
    after = torch_pjrt.metrics()["distributed"]
    programs = after["program_collectives"] - before["program_collectives"]
    hosted = (after["collectives"] - before["collectives"]) - programs
    failed = False
    for name, problems in results.items():
        if problems:
            failed = True
            print(f"FAIL {name}: " + "; ".join(problems), flush=True)
        else:
            print(f"OK {name}", flush=True)
    # Both transports ran: the host transport for exactly what programs cannot do.
    if programs == 0 or hosted == 0:
        failed = True
        print(f"FAIL transports: {programs} program and {hosted} host collectives", flush=True)
    else:
        print(f"OK transports programs={programs} host={hosted}", flush=True)
    sys.stdout.flush()
    os._exit(1 if failed else 0)


if __name__ == "__main__":
    main()
