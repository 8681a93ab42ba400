"""Ranks that run different programs (MPMD), and collectives the ranks disagree on, on "tpu" with tpu_dist.

Run under torchrun with 2 processes (tests/python/test_distributed_mpmd.py launches it):

  mpmd      DDP training in fused eager where rank 0 records extra ops of its own (statistics it reads only
            at the end) and every rank branches on its own data (a data-dependent sync inside the forward),
            so the ranks' fused streams differ; losses and final parameters against a single-process CPU run
            of the same model, data and seed (1e-5).
  mismatch  an all_reduce of different shapes on the two ranks, then a collective called as all_reduce on one
            rank and as broadcast on the other: each raises on both ranks, naming the collective, the group and
            each rank's call; the group still works afterwards.
  missing   rank 0 calls an all_reduce that rank 1 never calls, on a group whose timeout is 3 s: rank 0 raises
            within the timeout, naming rank 1 as missing; no hang.
  missing_unchecked  the same with the agreement off (TORCH_PJRT_DIST_CHECKS=0): gloo's timeout ends it, and the
            error names the collective and the group.

Each prints `OK <scenario> ...` on rank 0, or exits non-zero.
"""

import datetime
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import torch_pjrt
from teardown import finish  # noqa: E402

STEPS = 10
TOL = 1e-5
RANK = WORLD = 0
DEVICE = None


def say(msg):
    if RANK == 0:
        print(msg, flush=True)


def fail(msg):
    print(f"FAIL rank {RANK}: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


class Branchy(nn.Module):
    """A forward whose path depends on the data: a data-dependent sync (`.item()`) picks the activation."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 16)
        self.b = nn.Linear(16, 2)

    def forward(self, x):
        h = self.a(x)
        h = torch.relu(h) if h.sum().item() > 0 else torch.tanh(h)
        return self.b(h)


def data():
    g = torch.Generator().manual_seed(3)
    # Shards of opposite sign means, so the ranks take different branches at some steps.
    out = []
    for s in range(STEPS):
        x = torch.randn(2 * WORLD, 8, generator=g)
        x[0::2] += 1.5 if s % 2 else -1.5
        out.append((x, torch.randn(2 * WORLD, 2, generator=g)))
    return out


def reference(batches):
    """Each shard's loss separately on the CPU, then their mean: the gradient DDP's averaging gives."""
    torch.manual_seed(0)
    model = Branchy()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for x, y in batches:
        opt.zero_grad()
        shard_losses = [nn.functional.mse_loss(model(x[r::WORLD]), y[r::WORLD]) for r in range(WORLD)]
        loss = torch.stack(shard_losses).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {n: p.detach().clone() for n, p in model.named_parameters()}


def run_mpmd():
    batches = data()
    ref_losses, ref_params = reference(batches)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(Branchy().to(DEVICE))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses, stats = [], []
    streams0 = torch_pjrt.metrics()
    with torch_pjrt.fused():
        for x, y in batches:
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x[RANK::WORLD].to(DEVICE)), y[RANK::WORLD].to(DEVICE))
            loss.backward()
            if RANK == 0:  # ops only rank 0 records, read only after the loop
                stats.append(torch.stack([p.grad.norm() for p in model.parameters()]).sum())
            opt.step()
            total = loss.detach().clone()
            dist.all_reduce(total)
            losses.append(total / WORLD)
    losses = [t.item() for t in losses]
    stats = [t.item() for t in stats]
    if RANK == 0 and (len(stats) != STEPS or not all(s > 0 for s in stats)):
        fail(f"rank 0's own statistics are wrong: {stats}")
    ld = max(abs(a - b) for a, b in zip(losses, ref_losses))
    pd = max((p.detach().cpu() - ref_params[n]).abs().max().item() for n, p in model.module.named_parameters())
    if not (ld <= TOL and pd <= TOL):
        fail(f"mpmd: loss diff {ld:.3g}, param diff {pd:.3g} (tolerance {TOL})")
    say(f"OK mpmd max_loss_diff={ld:.3g} max_param_diff={pd:.3g}")


def expect_error(fn, *needles):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the message is what is checked
        msg = str(e)
        missing = [n for n in needles if n not in msg]
        if missing:
            fail(f"the error does not mention {missing}:\n{msg}")
        return msg
    fail(f"no error; expected one mentioning {needles}")


def run_mismatch():
    group = dist.new_group([0, 1])
    t = torch.ones(4 + RANK, 3, device=DEVICE)
    msg = expect_error(lambda: dist.all_reduce(t, group=group), "allreduce", "global rank 0: allreduce(SUM) Float[4, 3]",
                       "global rank 1: allreduce(SUM) Float[5, 3]", "the ranks' calls differ")
    if not torch.equal(t.cpu(), torch.ones(4 + RANK, 3)):
        fail("a failed all_reduce changed its tensor")
    u = torch.ones(2, device=DEVICE)
    call = (lambda: dist.all_reduce(u, group=group)) if RANK == 0 else (lambda: dist.broadcast(u, 0, group=group))
    msg2 = expect_error(call, "global rank 0: allreduce(SUM) Float[2]", "global rank 1: broadcast(root=0) Float[2]")
    # The group is still in step: a matching collective works.
    v = torch.full((3,), float(RANK + 1), device=DEVICE)
    dist.all_reduce(v, group=group)
    if v.cpu().tolist() != [3.0] * 3:
        fail(f"all_reduce after the mismatches gave {v.cpu().tolist()}")
    say("OK mismatch " + msg.splitlines()[0][:160])
    say("   " + msg2.replace("\n", " | ")[:300])


def run_missing():
    group = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=3))
    t = torch.ones(4, device=DEVICE)
    if RANK == 0:
        start = time.perf_counter()
        msg = expect_error(lambda: dist.all_reduce(t, group=group), "allreduce", "global rank(s) 1 did not reach it",
                           "3 s")
        took = time.perf_counter() - start
        if took > 30:
            fail(f"the missing rank was reported after {took:.1f} s, not about 3 s")
        say(f"OK missing after {took:.1f}s: " + msg[:200])
    dist.barrier()


def run_missing_unchecked():
    """The same with the agreement off (TORCH_PJRT_DIST_CHECKS=0, read when a group's backend is made): the host
    library's own timeout ends the collective, and the error still names the collective and the group."""
    os.environ["TORCH_PJRT_DIST_CHECKS"] = "0"
    try:
        group = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=3))
    finally:
        del os.environ["TORCH_PJRT_DIST_CHECKS"]
    t = torch.ones(4, device=DEVICE)
    if RANK == 0:
        start = time.perf_counter()
        msg = expect_error(lambda: dist.all_reduce(t, group=group), "tpu_dist: allreduce on group", "global ranks [0, 1]",
                           "failed on global rank 0")
        took = time.perf_counter() - start
        if took > 30:
            fail(f"the collective ended after {took:.1f} s, not about 3 s")
        if not torch.equal(t.cpu(), torch.ones(4)):
            fail("a failed all_reduce changed its tensor")
        say(f"OK missing_unchecked after {took:.1f}s: " + msg[:200])
    dist.barrier()


SCENARIOS = {"mpmd": run_mpmd, "mismatch": run_mismatch, "missing": run_missing,
             "missing_unchecked": run_missing_unchecked}


def main(names):
    global RANK, WORLD, DEVICE
    dist.init_process_group("cpu:gloo,tpu:tpu_dist", timeout=datetime.timedelta(seconds=120))
    RANK, WORLD = dist.get_rank(), dist.get_world_size()
    DEVICE = torch.device("tpu", int(os.environ["LOCAL_RANK"]))
    for name in names or list(SCENARIOS):
        SCENARIOS[name]()
        dist.barrier()
    dist.destroy_process_group()
    finish(0)


if __name__ == "__main__":
    main(sys.argv[1:])
