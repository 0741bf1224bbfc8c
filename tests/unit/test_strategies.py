"""The strategy protocol: every registry entry loads its class, and a strategy
added as one class plus one registry line gets the hooks it needs (here: an
in-process recovery that re-executes the failed step) without facade changes."""

from __future__ import annotations

import pytest
import torch

from jitbench.runtime import strategies
from jitbench.runtime.config import EXIT_FAILURE, RuntimeConfig
from jitbench.runtime.core import Runtime
from jitbench.runtime.events import EventLog, read_events
from jitbench.runtime.strategies.base import Strategy


@pytest.mark.parametrize("name", strategies.names())
def test_every_registered_strategy_loads_its_class(name):
    cls = strategies.load(name)
    assert issubclass(cls, Strategy) and cls.name == name
    assert cls.__new__(cls).replay_bound == strategies.REGISTRY[name].replay_bound


class Recovering(Strategy):
    """Recovers the first failure in process; ends the process on the next."""

    name = "recovering"
    snapshot_each_step = True

    def __init__(self, config: RuntimeConfig) -> None:
        super().__init__(config)
        self.failures: list[tuple[str, str, int]] = []

    def on_failure(self, rt: Runtime, trigger: str, phase: str) -> int | None:
        self.failures.append((trigger, phase, rt.completed))
        return None if len(self.failures) == 1 else EXIT_FAILURE


def test_a_strategy_recovering_in_process_repeats_the_failed_step(tmp_path, monkeypatch):
    monkeypatch.setitem(strategies.REGISTRY, "recovering", strategies.Entry(
        "recovering", f"{__name__}:Recovering", "test: in-process recovery"))
    exits: list[int] = []
    rt = Runtime(RuntimeConfig(strategy="recovering", ckpt_dir=str(tmp_path / "ck"),
                               hang_first_s=600),
                 EventLog(tmp_path / "ev" / "attempt000_rank00000.jsonl", 0, 0), 0, 1,
                 exit_fn=exits.append)
    try:
        model = torch.nn.Linear(2, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        rt.register(model, opt)
        assert rt.restore().step == 0
        ran: list[int] = []
        for step in rt.steps(1, 3):
            with rt.step(step):
                ran.append(step)
                if ran == [1, 2]:
                    raise RuntimeError("gloo: connection closed by peer")
                model(torch.ones(1, 2)).sum().backward()
                opt.step()
                opt.zero_grad()
        assert ran == [1, 2, 2, 3] and rt.completed == 3 and exits == []
        assert rt.strategy.failures == [("collective_error", "compute", 1)]
    finally:
        rt.close()
    evs = read_events(tmp_path / "ev")
    assert [e["step"] for e in evs if e["event"] == "step" and e["phase"] == "end"] == [1, 2, 3]
    assert [e["trigger"] for e in evs if e["event"] == "failure"] == ["collective_error"]


def test_set_strategy_refuses_unknown_names_and_missing_intervals(tmp_path):
    rt = Runtime(RuntimeConfig(strategy="none", ckpt_dir=str(tmp_path / "ck")),
                 EventLog(tmp_path / "e.jsonl", 0, 0), 0, 1)
    try:
        with pytest.raises(ValueError, match="unknown strategy"):
            rt.set_strategy("bogus")
        with pytest.raises(ValueError, match="interval"):
            rt.set_strategy("periodic-async", 0)
        assert rt.strategy.name == "none" and rt.config.strategy == "none"
    finally:
        rt.close()
