"""The CI slice of the conformance report (python -m torch_pjrt.conformance): every OpInfo of PyTorch's
op_db (every variant) runs its first sample on "tpu" (fallback as an error) and on the CPU, in float32 (or,
for OpInfos without float32, the first of int64, int32, bool, complex64, float64 they support), through the same harness as
the full report.

conformance_expected.json records each OpInfo's status in this slice. A test fails when an OpInfo does
worse than recorded: a recorded pass that no longer passes, or a new wrong result (mismatch) or error.
An OpInfo that does better is reported on stdout and passes; refresh the record with
    python tests/python/test_conformance.py --update
The full sweep (every sample and reference input, every dtype, gradients) is the command in the README.
"""

import json
import os
import sys

import pytest
import torch

from torch_pjrt import conformance

EXPECTED_PATH = os.path.join(os.path.dirname(__file__), "conformance_expected.json")
SLICE_DTYPES = (torch.float32, torch.int64, torch.int32, torch.bool, torch.complex64, torch.float64)
# how much worse each status is: a pass may never become anything else, nothing may become a wrong result
RANK = {"pass": 0, "skipped": 1, "not lowered": 1, "error": 2, "mismatch": 3}


def _ops():
    from torch.testing._internal.common_methods_invocations import op_db

    return {conformance.key(op): op for op in op_db}


def _slice_dtype(op):
    supported = op.supported_dtypes("cpu")
    return next((d for d in SLICE_DTYPES if d in supported), torch.float32)


def run_slice(op):
    return conformance.check_op(op, _slice_dtype(op), samples=1)


OPS = _ops()
with open(EXPECTED_PATH) as f:
    EXPECTED = json.load(f)


@pytest.fixture(scope="module", autouse=True)
def _fallback_as_error():
    import torch_pjrt

    old = torch_pjrt.get_fallback_policy()
    torch_pjrt.set_fallback_policy("error")
    yield
    torch_pjrt.set_fallback_policy(old)


def test_every_opinfo_is_recorded():
    assert sorted(set(OPS) - set(EXPECTED)) == [], "new OpInfos: run this file with --update"


@pytest.mark.parametrize("name", sorted(OPS))
def test_conformance_slice(name):
    r = run_slice(OPS[name])
    want = EXPECTED.get(name, {"status": "pass"})["status"]
    if RANK[r.status] < RANK[want]:
        print(f"{name}: better than recorded ({want} -> {r.status}); refresh with --update")
    # A float32 sum in another order differs from the CPU's in the last bits, by how much depends on the
    # machine (XLA's and oneDNN's kernels differ between CPU models): a mismatch where tpu's result is no
    # farther from the float64 result than the CPU's own is not a regression (PyTorch's reference tests
    # accept a result at least as accurate as the CPU's the same way); the report still counts it.
    if r.status == "mismatch" and r.nearer_exact:
        print(f"{name}: differs from the CPU but is nearer float64: {r.detail}")
        return
    if want == "pass":
        assert r.status == "pass", f"{name} no longer passes: {r.status}: {r.detail}"
    assert r.status != "mismatch" or want == "mismatch", f"{name}: wrong result: {r.detail}"
    assert r.status != "error" or want in ("error", "mismatch"), f"{name}: new error: {r.detail}"


def _update():
    import torch_pjrt

    torch_pjrt.set_fallback_policy("error")
    out = {}
    for name, op in sorted(OPS.items()):
        r = run_slice(op)
        out[name] = {"status": r.status, "detail": r.detail[:160]}
        print(f"{r.status:11} {name:45} {r.detail[:100]}", flush=True)
    with open(EXPECTED_PATH, "w") as f:  # one line per OpInfo, for readable diffs
        f.write("{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in sorted(out.items())) + "\n}\n")
    counts = {s: sum(v["status"] == s for v in out.values()) for s in conformance.STATUSES}
    print(counts)


if __name__ == "__main__":
    if "--update" in sys.argv:
        _update()


def test_nearer_float64_for_gradients():
    """A gradient mismatch is annotated with the side nearer the float64 gradient, computed with the same
    cotangents: gradients rounded from the float64 ones are nearer than those 1e-3 off."""
    op = OPS["sin"]
    s = next(iter(op.sample_inputs("cpu", torch.float32, requires_grad=True)))
    exact = conformance._grads(op, conformance._to_double((s.input, s.args, s.kwargs), keep_grad=True), 3)
    assert exact[0].dtype == torch.float64
    near = [g.float() for g in exact]
    far = [g.float() + 1e-3 for g in exact]
    note, nearer = conformance._nearer_exact(op, s, torch.float32, near, far, grad_seed=3)
    assert nearer and "tpu is nearer" in note, note
    note, nearer = conformance._nearer_exact(op, s, torch.float32, far, near, grad_seed=3)
    assert not nearer and "the CPU is nearer" in note, note
    # the float64 reference takes the float32 run's cotangents: the float32 gradient is within rounding
    single = conformance._grads(op, (s.input, s.args, s.kwargs), 3)
    torch.testing.assert_close(single[0].double(), exact[0], rtol=1e-5, atol=1e-5)
