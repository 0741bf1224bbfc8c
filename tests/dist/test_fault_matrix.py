"""The fault matrix run: every accepted cell of the cheap strategies fires
(issue 14, section 3).

203 cells (``nox -s heavy``): the 54 kind x point pairs under jit, periodic:3 and
periodic-async:3, and the 41 of them that ``none`` accepts (the other 13 need
checkpoint files and are refused up front: ``tests/unit/test_fault_matrix.py``).
Each runs the short spec of :func:`tests.unit.test_fault_matrix.heavy_plan` (tiny GPT,
2 ranks on gloo, 8 steps, the fault on rank 1 at step 4, a kill on the other rank
where the cell asks for one) without a reference, and asserts that the cell's
fault fired (``fired`` names it) and that nothing planned stayed unfired. The
peers' strategies (torchft, nvrx, nvrx-sections) and the replicas launchers
(jit-inprocess, inmem) are not run here: their cells are checked up front only.
"""

from __future__ import annotations

import pytest

from jitbench.faults.matrix import CHEAP_STRATEGIES, cells
from jitbench.harness.run import run as run_spec
from tests.unit.test_fault_matrix import heavy_plan

pytestmark = [pytest.mark.distributed, pytest.mark.slow, pytest.mark.heavy,
              pytest.mark.timeout(240)]

KNOWN: dict[tuple[str, str, str], str] = {}
"""Accepted cells that do not fire yet (strict xfail: a fix makes the test fail)."""

CELLS = [pytest.param(k, a, s, id=f"{k}-{a}-{s}",
                      marks=[pytest.mark.xfail(strict=True, reason=KNOWN[k, a, s])]
                      if (k, a, s) in KNOWN else [])
         for k, a, s in cells(list(CHEAP_STRATEGIES)) if heavy_plan(k, a, s) is not None]


@pytest.mark.parametrize("kind, at, strategy", CELLS)
def test_accepted_cell_fires(kind, at, strategy, tmp_path):
    spec = heavy_plan(kind, at, strategy)
    spec.max_restarts = 4
    out = run_spec(spec, tmp_path / "run", reference=False, timeout_s=200)
    s = out.summary
    cell = spec.faults[0]
    assert cell.id in {f["id"] for f in s["fired"]}, (s["end_reason"], s["fired"])
    assert s["unfired"] == [], s["unfired"]
