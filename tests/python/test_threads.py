"""Ops issued from several Python threads on one "tpu" device give the results of a serial run.

torch releases the GIL inside ops, so the threads really run the backend concurrently: program-cache
lookups and compiles, executions, storage swaps of in-place writes, and host transfers.
"""

import threading

import torch

THREADS = 4


def work(seed, device, steps=12):
    """A thread's program: its own tensors, shapes of its own (so threads compile concurrently), views,
    in-place ops and a reduction; returns CPU copies of its results."""
    g = torch.Generator().manual_seed(seed)
    n = 3 + seed % 3
    a = torch.randn(n, 8, generator=g).to(device)
    w = torch.randn(8, 8, generator=g).to(device)
    acc = torch.zeros(n, 8, device=device)
    out = []
    for i in range(steps):
        h = torch.tanh(a @ w) + i
        acc[:, ::2].add_(h[:, 1::2])
        acc.mul_(0.5)
        out.append(h.sum(1))
    out.append(acc)
    return [t.cpu() for t in out]


def run_threads(fn, args):
    results, errors = [None] * len(args), []

    def body(i):
        try:
            results[i] = fn(*args[i])
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(len(args))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a thread hangs"
    assert not errors, errors
    return results


def test_threads_match_serial_and_cpu():
    seeds = [10 + i for i in range(THREADS)]
    serial = [work(s, "tpu") for s in seeds]
    for _ in range(2):
        parallel = run_threads(work, [(s, "tpu") for s in seeds])
        for s, p in zip(serial, parallel):
            for x, y in zip(s, p):
                assert torch.equal(x, y), "a threaded run differs from the serial run"
    for seed, got in zip(seeds, serial):
        for x, y in zip(got, work(seed, "cpu")):
            torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)


def test_threads_writing_disjoint_views_of_one_storage():
    """Each thread adds into its own row of one shared tensor: no update may be lost, and no buffer may be
    freed while another thread's program reads it (this once crashed the process: StorageLock)."""
    base = torch.zeros(THREADS, 16, device="tpu")
    steps = 40

    def writer(i):
        row = base[i]
        for k in range(steps):
            row[k % 16 :].add_(1)
        return None

    run_threads(writer, [(i,) for i in range(THREADS)])
    expected = torch.zeros(16)
    for k in range(steps):
        expected[k % 16 :] += 1
    torch.testing.assert_close(base.cpu(), expected.expand(THREADS, 16).contiguous(), rtol=0, atol=0)


def test_threads_reading_a_shared_tensor_while_one_writes_another():
    shared = torch.arange(64, dtype=torch.float32, device="tpu").reshape(8, 8)
    other = torch.zeros(8, 8, device="tpu")

    def reader(_):
        return [(shared @ shared.T).sum().item() for _ in range(10)]

    def writer(_):
        for _ in range(10):
            other.add_(shared)
        return None

    res = run_threads(lambda i: writer(i) if i == 0 else reader(i), [(i,) for i in range(THREADS)])
    expected = float((torch.arange(64.0).reshape(8, 8) @ torch.arange(64.0).reshape(8, 8).T).sum())
    for r in res[1:]:
        assert r == [expected] * 10
    torch.testing.assert_close(other.cpu(), 10 * torch.arange(64.0).reshape(8, 8), rtol=0, atol=0)
