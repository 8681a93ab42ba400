"""Bad input at scale: every OpInfo's error_inputs (PyTorch's own bad-input cases for each op) run on "tpu".

Each case is built on the CPU, run there for the reference exception, then moved to "tpu" and run again.
On "tpu" it must raise the CPU's exception type, with the CPU's message (or one naming the op), never
crash or hang, and leave every input tensor as it was (values and version counter). The policy for ops
without a lowering is the default one (they run on the CPU through the fallback, which raises the CPU's
error), silenced.
"""

import faulthandler
import re

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db

import torch_pjrt

# Differences found by this test and not fixed yet (reported), by case id prefix. None now: index ranges and
# multinomial's probabilities are checked on the device (tests/python/test_device_checks.py), so those
# cases raise at the sync point.
KNOWN = {}


def _tensors(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for e in x:
            yield from _tensors(e)
    elif isinstance(x, dict):
        for e in x.values():
            yield from _tensors(e)


def _cases():
    cases = []
    for op in op_db:
        if op.error_inputs_func is None:
            continue
        try:
            eis = list(op.error_inputs(device="cpu"))
        except Exception:  # noqa: BLE001 - a generator that needs another device
            continue
        for i, ei in enumerate(eis):
            cases.append((op, ei, f"{op.name}{'.' + op.variant_test_name if op.variant_test_name else ''}-{i}"))
    return cases


CASES = _cases()


@pytest.fixture(scope="module", autouse=True)
def _watchdog(fallback_policy_module):
    faulthandler.dump_traceback_later(900, exit=True)  # a hang fails the run with every thread's stack
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="module")
def fallback_policy_module():
    old = torch_pjrt.get_fallback_policy()
    torch_pjrt.set_fallback_policy("silent")
    yield
    torch_pjrt.set_fallback_policy(old)


def test_at_least_500_cases():
    assert len(CASES) >= 500, len(CASES)


def _mover():
    """Moves tensors to "tpu" keeping their aliasing: tensors sharing a CPU storage (an out= that is also
    an input, an expanded view of another argument) share one "tpu" storage, at the same strides."""
    storages = {}

    def move(x):
        if not isinstance(x, torch.Tensor) or x.device.type != "cpu":
            return x
        key = (x.untyped_storage()._cdata, x.dtype)
        if key not in storages:
            whole = torch.empty(0, dtype=x.dtype).set_(x.untyped_storage(), 0,
                                                       (x.untyped_storage().nbytes() // x.element_size(),))
            storages[key] = whole.to("tpu")
        y = storages[key].as_strided(x.shape, x.stride(), x.storage_offset())
        return y.detach().requires_grad_() if x.requires_grad else y

    return move


def _run_one(op, ei):
    s = ei.sample_input
    try:
        op(s.input, *s.args, **s.kwargs)
        cpu_err = None
    except Exception as e:  # noqa: BLE001
        cpu_err = e
    try:
        moved = s.transform(_mover())
    except NotImplementedError:  # meta tensors: a case for another device
        pytest.skip("inputs on the meta device")
    inputs = [t for t in _tensors([moved.input, moved.args, moved.kwargs]) if t.device.type == "tpu"]
    before = [(t.cpu().clone(), t._version) for t in inputs]
    try:
        op(moved.input, *moved.args, **moved.kwargs)
        torch.tpu.synchronize()
        tpu_err = None
    except Exception as e:  # noqa: BLE001
        tpu_err = e
    changed = [i for i, (t, (v, ver)) in enumerate(zip(inputs, before))
               if t._version != ver or not torch.equal(t.cpu(), v) and not (
                   v.is_floating_point() and torch.equal(t.cpu().isnan(), v.isnan())
                   and torch.equal(t.cpu().nan_to_num(), v.nan_to_num()))]
    return cpu_err, tpu_err, changed


@pytest.mark.parametrize("case", range(len(CASES)), ids=[c[2] for c in CASES])
def test_error_input(case):
    op, ei, name = CASES[case]
    known = next((why for k, why in KNOWN.items() if name == k or name.startswith(k + "-")), None)
    if known:
        pytest.xfail(known)
    cpu_err, tpu_err, changed = _run_one(op, ei)
    assert not changed, f"{name}: inputs {changed} were modified"
    if cpu_err is None:
        # the case does not raise on the CPU either (it raises on other devices): "tpu" must not fail
        assert tpu_err is None, f"{name}: the CPU runs it, tpu raised {tpu_err!r}"
        return
    assert tpu_err is not None, f"{name}: the CPU raised {cpu_err!r}, tpu raised nothing"
    assert isinstance(tpu_err, type(cpu_err)), f"{name}: cpu {cpu_err!r}\ntpu {tpu_err!r}"
    cpu_msg, tpu_msg = str(cpu_err).split("\n")[0], str(tpu_err)
    op_names = {op.name, op.name.split(".")[-1], *(a.name if hasattr(a, "name") else str(a) for a in op.aliases)}
    assert (cpu_msg in tpu_msg or re.search(ei.error_regex, tpu_msg)
            or any(n and n in tpu_msg for n in op_names)), f"{name}: cpu {cpu_err!r}\ntpu {tpu_err!r}"
    # the device keeps working
    assert (torch.ones(2, device="tpu") + 1).cpu().tolist() == [2.0, 2.0]
