"""The main job's summary is unchanged by refactoring: a fixed-seed ``kill`` and
``nccl-hang`` run give the fields and values of the committed golden summaries
(``tests/golden``, made before the strategy/layer restructuring), timings aside."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent.parent / "golden"
sys.path.insert(0, str(GOLDEN))
import make  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.distributed]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("fault", make.FAULTS)
def test_summary_matches_golden(tmp_path, fault):
    want = json.loads((GOLDEN / f"summary-{fault}.json").read_text())
    got = make.stable(make.run(fault, tmp_path / "run"))
    assert sorted(got) == sorted(want), (set(got) ^ set(want))
    diff = {k: (got[k], want[k]) for k in want if got[k] != want[k]}
    assert not diff, diff
