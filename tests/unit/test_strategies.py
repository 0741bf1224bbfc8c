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
from tests.conftest import one_rank_runtime


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
    rt, model, opt = one_rank_runtime(tmp_path, "recovering", exit_fn=exits.append)
    try:
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


class FromMemory(Strategy):
    """Restores from a copy held in memory (as a peer's host memory would hold it)."""

    name = "from-memory"
    held: list = []

    def restore_from(self, rt: Runtime):
        from jitbench.runtime.strategies.base import Loaded

        if not self.held:
            return None
        state, meta = self.held[-1]
        return Loaded(state, {"meta": meta}, state["step"], "inmem", "peer 1")


def test_a_strategy_can_supply_the_restored_state(tmp_path, monkeypatch):
    import copy

    monkeypatch.setitem(strategies.REGISTRY, "from-memory", strategies.Entry(
        "from-memory", f"{__name__}:FromMemory", "test: restore from memory"))
    torch.manual_seed(0)
    models = [torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)]
    opts = [torch.optim.AdamW(m.parameters(), lr=0.1) for m in models]
    src = Runtime(RuntimeConfig(strategy="jit", ckpt_dir=str(tmp_path / "a"), hang_first_s=600),
                  EventLog(tmp_path / "a.jsonl", 0, 0), 0, 1)
    try:
        src.register(models[0], opts[0])
        src.restore()
        for step in (1, 2):
            with src.step(step):
                models[0](torch.ones(1, 2)).sum().backward()
                opts[0].step()
                opts[0].zero_grad()
        monkeypatch.setattr(FromMemory, "held",
                            [(copy.deepcopy(src.boundary_state()), src.manifest_meta())])
    finally:
        src.close()
    dst = Runtime(RuntimeConfig(strategy="from-memory", ckpt_dir=str(tmp_path / "b"),
                                hang_first_s=600),
                  EventLog(tmp_path / "ev" / "attempt000_rank00000.jsonl", 0, 0), 0, 1)
    try:
        dst.register(models[1], opts[1])
        res = dst.restore()
        assert (res.step, res.kind, res.source) == (2, "inmem", "peer 1") and dst.completed == 2
        assert torch.equal(models[1].weight, models[0].weight)
        assert torch.equal(opts[1].state[models[1].weight]["exp_avg"],
                           opts[0].state[models[0].weight]["exp_avg"])
    finally:
        dst.close()
    [end] = [e for e in read_events(tmp_path / "ev")
             if e["event"] == "restore" and e["phase"] == "end"]
    assert (end["step"], end["kind"], end["source"]) == (2, "inmem", "peer 1")


@pytest.mark.parametrize("name", list(strategies.REGISTRY))
def test_every_registered_strategy_builds_from_its_config(name, tmp_path):
    """Each registered class constructs from a RuntimeConfig of its own name with its
    option defaults (a subclass attribute colliding with a parent's property, say,
    breaks every run of that strategy at start-up)."""
    import importlib.util

    entry = strategies.REGISTRY[name]
    missing = [m for m in entry.requires if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"the {entry.extra} extra is not installed ({', '.join(missing)})")
    cls = strategies.load(name)
    interval = entry.default_interval or (0 if entry.interval in ("none", "optional") else 3)
    st = cls(RuntimeConfig(strategy=name, interval=interval, ckpt_dir=str(tmp_path),
                           options=entry.default_options()))
    assert st.name == name or name.startswith(st.name)
