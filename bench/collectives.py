"""torch.distributed on "tpu" through the c10d backend tpu_dist, side by side in one run with gloo on CPU
tensors: what host staging (device -> host, gloo, host -> device) and the ranks' agreement before each
collective (TORCH_PJRT_DIST_CHECKS) cost, for an all-reduce and for a DDP training step.

    python bench/collectives.py [--rounds 7] [--sample-s 0.2] [--only allreduce|ddp]    # 1-2 minutes on 2 cores

starts its own torchrun of 2 processes on this machine and prints rank 0's report and the launch's wall time.
Each process gets one thread per pool (TORCH_PJRT_CPU_THREADS=1 TORCH_PJRT_KERNEL_THREADS=1 OMP_NUM_THREADS=1:
2 processes on the 2 cores of our benchmark machine; docs/settings.md, TORCH_PJRT_CPU_THREADS) and its own device,
tpu:LOCAL_RANK (the CPU plugin gives each process LOCAL_WORLD_SIZE devices). Under torchrun directly

    python -m torch.distributed.run --standalone --nproc_per_node=2 bench/collectives.py

it is such a worker itself, with the environment it is given.

All-reduce (SUM, float32) of 4 KiB to 64 MiB, three ways on the group of
init_process_group("cpu:gloo,tpu:tpu_dist"), which hands CPU tensors to gloo and "tpu" tensors to tpu_dist:
  tpu_dist           a "tpu" tensor, the agreement on (tpu_dist's default);
  gloo               a CPU tensor: the transport tpu_dist stages through, without the staging;
  tpu_dist, no chk   a "tpu" tensor on a second such group, made by dist.new_group with
                     TORCH_PJRT_DIST_CHECKS=0 set in this process (the setting is read when a backend is made,
                     csrc/distributed/agreement.cpp); each group's agreement is verified through its Store.
A time is of one all-reduce, with its result on the device (torch.tpu.synchronize() after the last one), and
of the two ranks the slower one's. Bus bandwidth is NCCL-tests' 2(n-1)/n * bytes / time: what each rank's
link carries, comparable across world sizes (at n = 2 it is bytes / time).

DDP training step: an MLP of 4 linear layers of width 512, batch 64 per process, SGD, on "tpu" in one process
(plain, no DDP) and under DDP on 2 processes over tpu_dist (agreement on and off), and the same on the CPU
with gloo for context. One process is rank 0 alone while rank 1 waits in gloo (blocked, not spinning). Each
process has its own batch of 64, so at 2 processes a step does twice the work on twice the cores: the ratio
of their steps/s is the weak-scaling efficiency, 1.0 if the gradients' all-reduce and the sharing of the
machine cost nothing.

Everything is measured in rounds, as in bench/modes.py: each round times one sample of every candidate in
turn (an all-reduce: each size's three ways, size by size), and a candidate's time is its median over the
rounds. The machines we share drift by 10-30% over minutes; in rounds a slow stretch lowers one sample of each
candidate instead of every sample of one, which would move that candidate's ratios alone. A sample lasts at
least --sample-s (its count of iterations is set once, after a warm-up, and agreed by the ranks, since every
rank must run the same collectives).
"""

import argparse
import datetime
import gc
import math
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

NPROC = 2
SIZES = [4 << (10 + 2 * i) for i in range(8)]  # 4 KiB, 16 KiB, ..., 64 MiB
WIDTH, LAYERS, BATCH = 512, 4, 64
CHECKS = "TORCH_PJRT_DIST_CHECKS"
# A hang (ranks out of step) ends in an error within this, not at torch's default of 30 minutes.
TIMEOUT_S = 120


def launch(argv):
    env = dict(os.environ, TORCH_PJRT_CPU_THREADS="1", TORCH_PJRT_KERNEL_THREADS="1", OMP_NUM_THREADS="1",
               PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={NPROC}",
           os.path.abspath(__file__), *argv]
    t0 = time.perf_counter()
    rc = subprocess.call(cmd, env=env)
    print(f"wall time {time.perf_counter() - t0:.1f} s (torchrun of {NPROC} processes, start to exit)")
    return rc


# --------------------------------------------------------------------------------------------------------
# The ranks in step


_FLAG = torch.zeros(1)


def barrier():
    """The ranks start a sample together, so that neither times the other's lateness. A CPU tensor's all-reduce
    goes to gloo: no device work, and no agreement to count."""
    dist.all_reduce(_FLAG)


def agree_max(values):
    """values (floats, the same count on every rank), each the largest over the ranks."""
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def sample_count(run, target_s, warmup, lo, hi):
    """How many iterations make a sample of run (run(n): seconds per iteration over n in a row) last target_s,
    after warmup iterations (compiles, gloo's first use of a buffer size), agreed by the ranks. A rank that
    only waits for the others (run gives 0.0) takes their count."""
    run(warmup)
    s = run(lo)
    need = target_s / s if s > 0 else 0.0
    return int(min(max(math.ceil(agree_max([need])[0]), lo), hi))


def agreement_on(group, device):
    """Whether tpu_dist checks the ranks' calls on group. The agreement writes each rank's call under the key
    tpu_dist/agree/<collective #>/<rank> of the store it is given (csrc/distributed/agreement.cpp), which torch
    makes as PrefixStore("tpu/", the group's store); so after the group's first collective on "tpu", its key 0
    is there or not. Also checks that the all-reduce sums."""
    t = torch.ones(1, device=device)
    dist.all_reduce(t, group=group)
    if t.item() != group.size():
        raise RuntimeError(f"an all-reduce of ones on {group.size()} ranks gave {t.item()}")
    store = dist.PrefixStore("tpu/", dist.distributed_c10d._get_process_group_store(group))
    return store.check([f"tpu_dist/agree/0/{group.rank()}"])


def no_sync():
    pass


def sync_of(device):
    return torch.tpu.synchronize if device.type == "tpu" else no_sync


# --------------------------------------------------------------------------------------------------------
# All-reduce


def allreduce_s(t, group, iters):
    """Seconds per all-reduce of t. Each one reads the previous one's result (in place), so they run one after
    another, and the synchronize puts the last one's result on the device inside the timed region."""
    sync = sync_of(t.device)
    sync()
    barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(t, group=group)
    sync()
    return (time.perf_counter() - t0) / iters


def fmt_size(n):
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def fmt_time(s):
    return f"{s * 1e3:7.2f} ms" if s >= 1e-2 else f"{s * 1e6:7.0f} us"


def bus_gbs(size, s):
    return 2 * (NPROC - 1) / NPROC * size / s / 1e9


def allreduce_bench(args, device, unchecked):
    world = dist.group.WORLD
    cpu = torch.device("cpu")
    ways = [("tpu_dist", device, world), ("gloo", cpu, world), ("tpu_dist, no chk", device, unchecked)]
    # zeros: summed in place over and over they stay zeros (ones would reach inf after 128 sums)
    tensors = {(size, d.type): torch.zeros(size // 4, device=d) for size in SIZES for d in (device, cpu)}
    iters = {(way, size): sample_count(lambda n, t=tensors[size, d.type], g=g: allreduce_s(t, g, n),
                                       args.sample_s, 2, 2, 2000)
             for size in SIZES for way, d, g in ways}
    times = {key: [] for key in iters}
    for _ in range(args.rounds):
        gc.collect()
        for size in SIZES:
            for way, d, g in ways:
                times[way, size].append(allreduce_s(tensors[size, d.type], g, iters[way, size]))
    slowest = agree_max([s for key in times for s in times[key]])
    k = 0
    for key in times:  # dicts keep their order: the same on every rank
        times[key], k = slowest[k:k + args.rounds], k + args.rounds
    med = {key: statistics.median(v) for key, v in times.items()}
    if dist.get_rank() == 0:
        print(f"all-reduce (SUM, float32), {NPROC} processes; time per all-reduce and bus bandwidth, medians of "
              f"{args.rounds} rounds")
        print(f"  {'size':>7}  {'tpu_dist':>19}  {'gloo (CPU tensors)':>19}  {'tpu/gloo':>8}  "
              f"{'tpu_dist, no chk':>19}  {'chk on/off':>10}  {'no chk/gloo':>11}")
        for size in SIZES:
            cells = [f"{fmt_time(med[w, size])} {bus_gbs(size, med[w, size]):6.3g} GB/s" for w, _, _ in ways]
            tpu, gloo, off = (med[w, size] for w, _, _ in ways)
            print(f"  {fmt_size(size):>7}  {cells[0]}  {cells[1]}  {tpu / gloo:7.2f}x  {cells[2]}  "
                  f"{tpu / off:9.2f}x  {off / gloo:10.2f}x", flush=True)
    return med


# --------------------------------------------------------------------------------------------------------
# DDP training step


def train_step(device, group):
    """A step (forward, loss, backward, SGD) of the MLP on device, under DDP on group unless group is None."""
    torch.manual_seed(0)  # the same weights on every rank and every candidate
    layers = []
    for i in range(LAYERS):
        layers += [nn.Linear(WIDTH, WIDTH)] + ([nn.ReLU()] if i < LAYERS - 1 else [])
    model = nn.Sequential(*layers).to(device)
    if group is not None:
        model = nn.parallel.DistributedDataParallel(model, process_group=group)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(dist.get_rank())  # each rank its own batch, as in data parallelism
    x = torch.randn(BATCH, WIDTH, generator=g).to(device)
    y = torch.randint(0, WIDTH, (BATCH,), generator=g).to(device)

    def step():
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step


def steps_s(step, sync, steps, alone):
    """Seconds per step over steps in a row, the last one's work done. alone: rank 0 runs them while the other
    ranks wait in a barrier (gloo blocks, it does not spin: the machine is rank 0's), and they give 0.0."""
    sync()
    barrier()
    s = 0.0
    if step is not None:
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        s = (time.perf_counter() - t0) / steps
    if alone:
        barrier()
    return s


def ddp_bench(args, device, unchecked):
    world = dist.group.WORLD
    cpu = torch.device("cpu")
    rank0 = dist.get_rank() == 0
    # (label, device, DDP group or None for one process)
    candidates = [("tpu, 1 process", device, None), ("tpu, DDP 2 processes", device, world),
                  ("tpu, DDP, no chk", device, unchecked),
                  ("cpu, 1 process", cpu, None), ("cpu, DDP (gloo) 2 processes", cpu, world)]
    steps, runs = {}, {}
    for label, d, group in candidates:
        alone = group is None
        step = train_step(d, group) if rank0 or not alone else None
        runs[label] = (step, sync_of(d), alone)
        steps[label] = sample_count(lambda n, r=runs[label]: steps_s(r[0], r[1], n, r[2]), args.ddp_sample_s, 3, 3,
                                    10000)
    times = {label: [] for label, _, _ in candidates}
    for _ in range(args.rounds):
        gc.collect()
        for label, _, _ in candidates:
            step, sync, alone = runs[label]
            times[label].append(steps_s(step, sync, steps[label], alone))
    slowest = agree_max([s for label in times for s in times[label]])
    rates = {}
    for i, label in enumerate(times):
        rates[label] = [1 / s for s in slowest[i * args.rounds:(i + 1) * args.rounds]]
    med = {label: statistics.median(r) for label, r in rates.items()}
    if rank0:
        print(f"DDP training step: MLP of {LAYERS} x Linear({WIDTH}, {WIDTH}), batch {BATCH} per process, SGD; "
              f"medians of {args.rounds} rounds [each round]")
        for label, r in rates.items():
            base = med[label.split(",")[0] + ", 1 process"]
            each = ", ".join(f"{v:.1f}" for v in r)
            print(f"  {label:27s} {med[label]:7.1f} steps/s  {med[label] / base:5.2f}x 1 process   [{each}]",
                  flush=True)
    return med


def summary(ar, ddp):
    """The ratios of the medians above that say what the host path and the agreement cost."""
    print("summary (ratios of the medians above):")
    if ar:
        small, large = SIZES[0], SIZES[-1]

        def ratios(a, b):
            r = [ar[a, n] / ar[b, n] for n in SIZES]
            return (f"{r[0]:.2f}x at {fmt_size(small)}, {r[-1]:.2f}x at {fmt_size(large)} "
                    f"(range {min(r):.2f}-{max(r):.2f}x)")

        print(f"  all-reduce time, tpu_dist / gloo (host staging and agreement): {ratios('tpu_dist', 'gloo')}")
        print(f"  all-reduce time, tpu_dist no chk / gloo (host staging alone):  {ratios('tpu_dist, no chk', 'gloo')}")
        print(f"  all-reduce time, tpu_dist chk on / off (the agreement):        "
              f"{ratios('tpu_dist', 'tpu_dist, no chk')}; "
              f"{(ar['tpu_dist', small] - ar['tpu_dist, no chk', small]) * 1e6:.0f} us per collective at "
              f"{fmt_size(small)}")
        print(f"  bus bandwidth at {fmt_size(large)}: tpu_dist {bus_gbs(large, ar['tpu_dist', large]):.2f} GB/s, "
              f"gloo {bus_gbs(large, ar['gloo', large]):.2f} GB/s")
    if ddp:
        print(f"  DDP step on tpu, 2 processes / 1 process (steps/s):  "
              f"{ddp['tpu, DDP 2 processes'] / ddp['tpu, 1 process']:.2f}x "
              f"(no chk: {ddp['tpu, DDP, no chk'] / ddp['tpu, 1 process']:.2f}x)")
        print(f"  DDP step on cpu, 2 processes / 1 process (steps/s):  "
              f"{ddp['cpu, DDP (gloo) 2 processes'] / ddp['cpu, 1 process']:.2f}x")
        print(f"  DDP step, tpu_dist chk on / off (steps/s):           "
              f"{ddp['tpu, DDP 2 processes'] / ddp['tpu, DDP, no chk']:.2f}x")
        print(f"  DDP step, tpu / cpu (steps/s): 1 process {ddp['tpu, 1 process'] / ddp['cpu, 1 process']:.2f}x, "
              f"2 processes {ddp['tpu, DDP 2 processes'] / ddp['cpu, DDP (gloo) 2 processes']:.2f}x")


def worker(args):
    import torch_pjrt.distributed  # here, not at the top: the launching process starts no PJRT client

    # The default group measures tpu_dist as a user gets it, agreement on, whatever the environment says.
    os.environ.pop(CHECKS, None)
    dist.init_process_group("cpu:gloo,tpu:tpu_dist", timeout=datetime.timedelta(seconds=TIMEOUT_S))
    if dist.get_world_size() != NPROC:
        raise SystemExit(f"collectives.py: runs on {NPROC} processes, not {dist.get_world_size()}")
    device = torch.device("tpu", int(os.environ["LOCAL_RANK"]))
    os.environ[CHECKS] = "0"
    try:
        unchecked = dist.new_group(backend="cpu:gloo,tpu:tpu_dist")
    finally:
        os.environ.pop(CHECKS)
    on, off = agreement_on(dist.group.WORLD, device), agreement_on(unchecked, device)
    if not on or off:
        raise RuntimeError(f"the agreement is {'on' if on else 'off'} on the default group and "
                           f"{'on' if off else 'off'} on the {CHECKS}=0 group: on and off expected")
    if dist.get_rank() == 0:
        # ranks in separate processes take the host transport (tpu_dist's programs need every rank on one client)
        print(f"tpu_dist transport: {torch_pjrt.distributed.transport(dist.group.WORLD)} "
              f"(no chk group: {torch_pjrt.distributed.transport(unchecked)})", flush=True)
    ar = allreduce_bench(args, device, unchecked) if args.only in (None, "allreduce") else None
    ddp = ddp_bench(args, device, unchecked) if args.only in (None, "ddp") else None
    if dist.get_rank() == 0:
        summary(ar, ddp)
    dist.destroy_process_group()
    # torch 2.13's teardown of a process that ran DDP over gloo aborts now and then at exit (without torch_pjrt
    # too; tests/python/distributed/teardown.py): end here, every result printed.
    sys.stdout.flush()
    os._exit(0)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7,
                        help="rounds of every candidate in turn; a candidate's time is its median over them")
    parser.add_argument("--sample-s", type=float, default=0.2,
                        help="an all-reduce sample lasts at least this long (at least 2 all-reduces)")
    parser.add_argument("--ddp-sample-s", type=float, default=0.5,
                        help="a training step sample lasts at least this long (at least 3 steps)")
    parser.add_argument("--only", choices=["allreduce", "ddp"], default=None)
    args = parser.parse_args()
    if "LOCAL_RANK" not in os.environ:  # not under torchrun: start it
        sys.exit(launch(sys.argv[1:]))
    worker(args)


if __name__ == "__main__":
    main()
