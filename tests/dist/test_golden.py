"""The main job's summary is unchanged by refactoring: a fixed-seed ``kill`` and
``nccl-hang`` run give the fields and values of the committed golden summaries
(``tests/golden``, made before the strategy/layer restructuring), timings aside."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent.parent / "golden"
sys.path.insert(0, str(GOLDEN))
import make  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.distributed]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("fault", [f if f == "kill" else pytest.param(f, marks=pytest.mark.heavy)
                                   for f in make.FAULTS])
def test_summary_matches_golden(tmp_path, fault):
    want = json.loads((GOLDEN / f"summary-{fault}.json").read_text())
    got = make.stable(make.run(fault, tmp_path / "run"))
    assert sorted(got) == sorted(want), (set(got) ^ set(want))
    diff = {k: (got[k], want[k]) for k in want if not _same(got[k], want[k])}
    assert not diff, diff


def _same(got, want) -> bool:
    """Equal, except that a float may differ from the golden one in its last bits: the
    golden files were made on another CPU, whose kernels (oneDNN/BLAS, chosen per
    instruction set) may round a loss differently by an ulp. Bitwise equality of a
    run and its reference on one machine is what ``state_equal`` asserts."""
    if isinstance(want, dict):
        return isinstance(got, dict) and sorted(got) == sorted(want) and all(
            _same(got[k], want[k]) for k in want)
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(
            _same(g, w) for g, w in zip(got, want, strict=True))
    if isinstance(want, float) and isinstance(got, float):
        return math.isclose(got, want, rel_tol=1e-6)
    return got == want
