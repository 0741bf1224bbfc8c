"""The strategy protocol: every registry entry loads its class, and a strategy
added as one class plus one registry line gets the hooks it needs (here: an
in-process recovery that re-executes the failed step) without facade changes."""

from __future__ import annotations

import pytest
import torch

from jitbench.runtime import strategies
from jitbench.runtime.config import EXIT_FAILURE, RuntimeConfig
from jitbench.runtime.core import Runtime, describe_failure
from jitbench.runtime.events import EventLog, read_events
from jitbench.runtime.strategies.base import Strategy
from jitbench.runtime.strategies.jit import JustInTime
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


class JitWithWork(JustInTime):
    """A subclass of jit with work of its own at the optimizer step and the boundary."""

    def __init__(self, config: RuntimeConfig) -> None:
        super().__init__(config)
        self.seen: list[tuple[str, int]] = []

    def on_optimizer_step(self, rt: Runtime) -> None:
        self.seen.append(("optimizer", rt.step_in_progress))
        super().on_optimizer_step(rt)

    def at_boundary(self, rt: Runtime, step: int) -> None:
        self.seen.append(("boundary", step))
        super().at_boundary(rt, step)


def test_a_subclass_s_hooks_run_whatever_its_parent_s_flags_say(tmp_path, monkeypatch):
    """The runtime calls a strategy's optimizer-step and boundary hooks only where its
    hooks_* flags say so (read at register and set_strategy); jit's say no without a
    GPU or a backstop, and a subclass that overrides the hooks is still called."""
    monkeypatch.setitem(strategies.REGISTRY, "jit-with-work", strategies.Entry(
        "jit-with-work", f"{__name__}:JitWithWork", "test: a jit subclass"))
    rt, model, opt = one_rank_runtime(tmp_path, "jit-with-work")
    try:
        assert not JustInTime.hooks_boundary(JustInTime(rt.config), rt)
        assert not JustInTime.hooks_optimizer_step(JustInTime(rt.config), rt)
        for step in rt.steps(1, 2):
            with rt.step(step):
                model(torch.ones(1, 2)).sum().backward()
                opt.step()
                opt.zero_grad()
        assert rt.strategy.seen == [("optimizer", 1), ("boundary", 1),
                                    ("optimizer", 2), ("boundary", 2)]
    finally:
        rt.close()
    plain = JustInTime(rt.config)
    plain.at_boundary = lambda rt_, step: None  # set on the instance: asked for too
    assert plain.hooks_boundary(rt) and not plain.hooks_optimizer_step(rt)


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


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", ["own code", "in collective", "re-formed"])
def test_a_kept_rank_whose_main_thread_never_returns_fails_itself(tmp_path, case):
    """After an in-process decision taken on the watchdog thread keeps this rank, its
    main thread must come back to re-form. Stuck in its own code (it posted no
    collective of its step) past the hang bound, the rank fails itself (``stuck``: it
    saves its JIT part and leaves) and posts the failure of the generation it never
    joined; waiting in its posted collective, the bound is ``sync_bound_s`` instead
    (a leaving peer may save that long); a main thread that returns, or that has
    joined the decided generation (it came back through ``before_redo``), ends the
    wait."""
    in_collective = case != "own code"
    import time
    from datetime import timedelta
    from types import SimpleNamespace

    import torch.distributed as dist

    from jitbench.runtime.inprocess.membership import Decision, Membership

    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=10))
    exits: list[int] = []
    rt, model, opt = one_rank_runtime(tmp_path, "jit-inprocess", exit_fn=exits.append,
                                      sync_bound_s=600.0)
    try:
        strat = rt.strategy
        strat.group = SimpleNamespace(membership=lambda main: Membership(store, 1),
                                      gen=1 if case == "re-formed" else 0)
        rt.hang_bound_s = lambda: 0.2  # the watchdog's own hang bound stays 600 s
        rt.begin_step(1)
        if case == "in collective":
            rt.mark_collective(1)
        strat._expect_main(rt, Decision(gen=1, members={}, source=0, resume_step=0))
        # five times the bound when it must not fire, else until it fires
        deadline = time.monotonic() + (1.0 if in_collective else 20.0)
        while not exits and time.monotonic() < deadline:
            time.sleep(0.05)
        if in_collective:
            assert exits == [] and Membership(store, 1).failure_posted(1) is None
            assert (strat._expecting is None) == (case == "re-formed")
            strat._main_returned(rt)
            time.sleep(0.5)
            assert exits == []
        else:
            assert exits and exits[0] != 0
            posted = Membership(store, 1).failure_posted(1)
            assert posted["rank"] == 0 and "did not return" in posted["reason"]
    finally:
        rt.close()
    evs = read_events(tmp_path / "ev")
    stuck = [e for e in evs if e["event"] == "failure" and e["trigger"] == "stuck"]
    assert len(stuck) == (0 if in_collective else 1)
    if not in_collective:
        assert stuck[0]["bound_s"] == 0.2 and stuck[0]["waited_s"] > 0.2
        assert [e["kind"] for e in evs if e["event"] == "save" and e["phase"] == "end"] \
            == ["jit"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("outcome", ["re-formed", "left"])
def test_a_failure_outside_a_step_is_recovered_as_one_inside(tmp_path, outcome):
    """A newcomer's DDP construction fails when a member dies during its broadcast
    (before any step block): Runtime.recover declares it like an exception escaping a
    step (trigger collective_error for a reset connection) and, where the strategy
    recovers in process, finishes the recovery at once (before_redo re-forms; the
    collectives of the adopted boundary count as done); a strategy that cannot recover
    ends the process with its status."""
    exits: list[int] = []
    rt, _, _ = one_rank_runtime(tmp_path, "jit-inprocess", exit_fn=exits.append)
    calls = []
    try:
        strat = rt.strategy
        strat.on_failure = lambda rt_, trigger, phase: calls.append((trigger, phase))

        def before_redo(rt_):
            calls.append("redo")
            return None if outcome == "re-formed" else 79
        strat.before_redo = before_redo
        rt.mark_collective(3)  # a collective of the lost generation, posted
        back = rt.recover(*describe_failure(RuntimeError("Connection reset by peer")))
        assert calls == [("collective_error", "boundary"), "redo"]
        if outcome == "re-formed":
            assert back is True and exits == [] and rt.posted == rt.completed == 0
            assert not rt.leaving
        else:
            assert back is False and exits == [79]
    finally:
        rt.close()
    [failure] = [e for e in read_events(tmp_path / "ev") if e["event"] == "failure"]
    assert failure["trigger"] == "collective_error" and "Connection reset" in failure["error"]


def test_a_newcomer_recovers_from_a_failed_wrap_after_letting_go_of_it():
    """A newcomer's failed DDP wrap (a member died during its broadcast) goes to
    Runtime.recover as a collective failure, and only once the exception is gone: its
    traceback held the half-built wrapper and the old process group, which a peer
    blocked in the old collective waits on. A wrap that succeeds recovers nothing."""
    import gc
    import weakref
    from types import SimpleNamespace

    from jitbench.harness.worker import _wrap_as_newcomer

    class Wrapper:  # stands for the half-built DDP its frame holds
        pass

    held: list[weakref.ref] = []

    def wrap():
        half_built = Wrapper()
        held.append(weakref.ref(half_built))
        raise RuntimeError("[gloo] Connection reset by peer")

    seen = []

    def recover(trigger, error):
        gc.collect()
        seen.append((trigger, error, held[0]() is None))
        return True

    _wrap_as_newcomer(SimpleNamespace(wrap=wrap), SimpleNamespace(recover=recover))
    assert seen == [("collective_error", "RuntimeError: [gloo] Connection reset by peer", True)]
    seen.clear()
    _wrap_as_newcomer(SimpleNamespace(wrap=lambda: None), SimpleNamespace(recover=recover))
    assert seen == []
