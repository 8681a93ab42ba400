"""Conformance of every collective of the c10d backend tpu_dist at world size 2: each result compared with
the value plain torch computes on the CPU from the same inputs (distributed/collectives_worker.py has the
checks, the dtype x op matrix and how inputs and expected values are made).

Three torchrun launches (2 processes, one "tpu" device each), one per way of making the default group:
  tpu_dist: ``init_process_group("tpu_dist")`` runs every section of checks (with tpu_dist alone, barrier and
            the object collectives run through it too);
  default:  ``init_process_group()`` and
  mixed:    ``init_process_group("cpu:gloo,tpu:tpu_dist")`` run the short "init" section (backend names,
            all_reduce, barrier, all_gather_object).
Each section is a test, which passes when the worker printed ``SECTION <name> ... failed=0``; a failing
check prints its line ``FAIL <section>/<check>: rank 0: ... | rank 1: ...`` into the assertion. Checks of a
dtype the device does not hold (float8_e4m3fn on the CPU plugin) are SKIP lines, not failures.

TORCH_PJRT_FALLBACK=error: no op of a check may fall back to the CPU.
"""

import importlib.util
import re

import pytest
from torchrun import WORKERS, launch, tail

WORKER = "collectives_worker.py"


def _sections():
    spec = importlib.util.spec_from_file_location("collectives_worker", WORKERS / WORKER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return list(mod.SECTIONS)


SECTIONS = _sections()
# On 2 cores: ~10-15 s for the tpu_dist launch, ~6 s for each short one, warm or cold program cache alike.
LAUNCHES = {"tpu_dist": SECTIONS, "default": ["init"], "mixed": ["init"]}
ENV = {"DIST_DEVICE": "tpu", "TORCH_PJRT_FALLBACK": "error"}


def _launch(form):
    """One torchrun launch of the worker per form and test session (tests/python/torchrun.py caches it)."""
    return launch(WORKER, [form, *LAUNCHES[form]], ENV)


def _tail(out):
    return tail(out, 8000)


def _check_section(form, section):
    rc, out = _launch(form)
    summary = re.search(rf"^SECTION {re.escape(section)} ok=(\d+) skipped=(\d+) failed=(\d+) of=(\d+)$", out,
                        re.MULTILINE)
    fails = re.findall(rf"^FAIL {re.escape(section)}/.*$", out, re.MULTILINE)
    assert summary, (f"no 'SECTION {section}' line from the worker (form {form}, exit status {rc}); "
                     f"its output:\n{_tail(out)}")
    assert not fails and summary.group(3) == "0", (
        f"{summary.group(3)} of {summary.group(4)} checks of section {section} failed (form {form}):\n"
        + "\n".join(fails))
    for line in re.findall(rf"^(?:SKIP {re.escape(section)}/.*|INFO {re.escape(section)} .*)$", out, re.MULTILINE):
        print(line)
    # Every check passed; a launch that still ended badly (a crash at shutdown, a failure elsewhere that the
    # other tests report) must not pass unnoticed once all sections are fine.
    if all(re.search(rf"^SECTION {re.escape(s)} .* failed=0 ", out, re.MULTILINE) for s in LAUNCHES[form]):
        assert rc == 0, f"every section passed but the launch exited with {rc}; its output:\n{_tail(out)}"


@pytest.mark.parametrize("section", SECTIONS)
def test_collectives(section):
    """A section of checks, with init_process_group("tpu_dist")."""
    _check_section("tpu_dist", section)


@pytest.mark.parametrize("form", ["default", "mixed"])
def test_init_forms(form):
    """init_process_group() and init_process_group("cpu:gloo,tpu:tpu_dist"): the short section."""
    _check_section(form, "init")
