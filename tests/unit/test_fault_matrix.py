"""Every fault kind x injection point x strategy: refused before launch, or it fires
(issue 14, section 3). The up-front refusal and this matrix read one table,
:mod:`jitbench.faults.matrix`; ``tests/dist/test_fault_matrix.py`` runs the accepted
cells of the cheap strategies."""

from __future__ import annotations

import pytest

from jitbench.errors import SpecError
from jitbench.faults import FAULTS, FaultSpec
from jitbench.faults.matrix import CHEAP_STRATEGIES, all_strategies, cells, points, reach, where
from jitbench.runtime import strategies
from tests.conftest import small_spec

STEP = 4
"""Step of the cell's fault (1-based), in a run of 8 steps."""


def cell_spec(kind: str, at: str, strategy: str, faults: list[FaultSpec] | None = None):
    """The short spec of one cell: the fault on rank 1 at :data:`STEP` (fp16 for
    ``amp-backoff``), plus ``faults``."""
    cls = FAULTS[kind]
    params = {"at": at} if cls.movable else {}
    extra = {"max_bytes": 2000, **({"amp": "fp16"} if cls.in_reference else {})}
    f = FaultSpec(kind, 1, STEP, params=params)
    return small_spec(8, strategy=strategy, faults=[f, *(faults or [])], extra=extra), f


def test_every_cell_is_refused_up_front_or_says_where_it_fires(monkeypatch):
    """594 cells (66 kind x point pairs of 18 kinds x 9 strategies). Each bare cell
    (the fault alone) either raises SpecError, one line, whose reason is the
    matrix's (:func:`reach`; torchft's fp16 refusal is the spec's own), or is
    accepted and :func:`where` names the point it fires at. Optional extras are
    treated as installed (their absence is another refusal)."""
    monkeypatch.setattr(strategies, "check_available", lambda name: None)
    assert len(all_strategies()) == len(strategies.REGISTRY) == 9
    assert sum(len(points(k)) for k in FAULTS) == 66
    all_cells = cells()
    assert len(all_cells) == 594
    refused = 0
    for kind, at, strategy in all_cells:
        spec, f = cell_spec(kind, at, strategy)
        why = reach(f, spec)
        try:
            spec.validate()
        except SpecError as exc:
            msg = str(exc)
            assert "\n" not in msg, (kind, at, strategy)
            assert (msg.endswith(why) if why else "fp16" in msg), (kind, at, strategy, msg)
            refused += 1
            continue
        assert why is None and where(f, spec), (kind, at, strategy)
    # 361 bare cells accepted; the network faults' 108 are refused here (no namespaced node)
    assert refused == 233, refused


def test_a_write_or_restore_cell_is_accepted_with_the_failing_fault_it_asks_for():
    """The refusals of ``write``/``restore``/``corrupt`` cells name what is missing; with
    a kill on the other rank where they ask for one (before step k for corrupt, at
    step k for a write, at k + 2 for a restore, k + 3 under periodic-async, whose
    save of step k - 1 is surely committed only once the next save began), jit and
    periodic:3 accept every
    such cell (write faults on rank 0 under periodic)."""
    for strategy in ("jit", "periodic:3"):
        for kind, at, _ in cells([strategy]):
            if at not in ("write", "restore") and kind != "corrupt":
                continue
            plan = heavy_plan(kind, at, strategy)
            assert plan is not None, (kind, at, strategy)


def heavy_plan(kind: str, at: str, strategy: str):
    """The spec that makes cell (kind, at, strategy) fire, or None if it is refused:
    the bare cell, else with the failing fault its refusal asks for."""
    spec, f = cell_spec(kind, at, strategy)
    writers = strategies.parse(strategy).writers
    if (at == "write" or kind in ("enospc", "eio", "torn-write")) and writers == ("rank0",):
        f.rank, f.id = 0, ""
        f.__post_init__()
    if reach(f, spec) is not None:
        # a restore cell needs a committed checkpoint of step >= STEP - 1 when the
        # companion kills: an asynchronous save of step 3 may still be writing at step
        # 6 (it did under load); it is committed once step 6's save waited for it
        late = 3 if strategies.parse(strategy).entry.replay_bound == "interval-async" else 2
        g = {"corrupt": 2}.get(kind, STEP + late if at == "restore" else STEP)
        spec.faults.append(FaultSpec("kill", 1 - f.rank, g, id="companion"))
    try:
        spec.validate()
    except SpecError:
        return None
    return spec


@pytest.mark.parametrize("strategy, n", [("jit", 54), ("periodic:3", 54),
                                         ("periodic-async:3", 54), ("none", 41)])
def test_heavy_matrix_runs_203_cells(strategy, n):
    """The heavy test's plans (:func:`heavy_plan`): every cell of jit and the periodic
    strategies, and under none all but the 13 that need checkpoint files."""
    assert CHEAP_STRATEGIES == ("jit", "periodic:3", "periodic-async:3", "none")
    assert sum(heavy_plan(k, a, strategy) is not None for k, a, _ in cells([strategy])) == n
