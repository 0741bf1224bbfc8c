"""A failure declared on another thread while the training thread is inside the
optimizer step (the ``mutating`` phase, state lock held): SIGTERM from the elastic
agent, a peer's notice, a fatal Xid. The watchdog's failure path sets the phase to
``failure`` at that instant; the training thread must still finish its step and
let go of the state lock, so the JIT save writes the boundary after that step.

Found by ``tests/dist/test_hygiene.py`` (SIGTERM to the harness 0.04 s into step
5 of both ranks): ``_end`` read the phase to decide whether it held the lock,
took it a second time and blocked; the save waited ``save_lock_timeout_s`` and was
skipped ("optimizer step did not finish"), exit 76 with no checkpoint.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import torch

from jitbench.runtime.config import EXIT_FAILURE_SAVED
from jitbench.runtime.core import Runtime
from jitbench.runtime.events import read_events
from tests.conftest import one_rank_runtime

pytestmark = pytest.mark.timeout(60)


def _declare_sigterm(rt: Runtime) -> None:
    os.kill(os.getpid(), signal.SIGTERM)  # the watchdog thread declares it


def _train(rt: Runtime, model: torch.nn.Module, opt: torch.optim.Optimizer, last: int,
           stop_after: int | None = None) -> None:
    """Steps 1..``last`` of the one-rank model (or up to ``stop_after``)."""
    for step in rt.steps(1, last):
        with rt.step(step):
            model(torch.ones(1, 2)).sum().backward()
            opt.step()
            opt.zero_grad()
        if step == stop_after:
            break


def _wait_for_exit(codes: list[int]) -> None:
    """Until the runtime's exit function was called (20 s at most)."""
    deadline = time.monotonic() + 20
    while not codes and time.monotonic() < deadline:
        time.sleep(0.01)


def _declare_notice(rt: Runtime) -> None:
    threading.Thread(target=rt.fail, args=("notice",), kwargs={"reason": "peer left"},
                     daemon=True).start()


@pytest.mark.parametrize("declare", [_declare_sigterm, _declare_notice],
                         ids=["sigterm", "notice"])
def test_a_failure_inside_the_optimizer_step_saves_that_steps_boundary(tmp_path, declare):
    codes: list[int] = []
    rt, model, opt = one_rank_runtime(tmp_path, "jit", exit_fn=codes.append,
                                      save_lock_timeout_s=5.0)
    try:
        def inside_the_step(*_):  # runs in the mutating phase, state lock held
            if rt.completed == 3:
                declare(rt)
                deadline = time.monotonic() + 5
                while not any(e["event"] == "failure" for e in read_events(tmp_path / "ev")):
                    assert time.monotonic() < deadline, "no failure declared"
                    time.sleep(0.01)

        opt.register_step_post_hook(inside_the_step)
        _train(rt, model, opt, 6, stop_after=4)
        _wait_for_exit(codes)
    finally:
        rt.close()
    evs = read_events(tmp_path / "ev")
    failure = next(e for e in evs if e["event"] == "failure")
    assert failure["in_phase"] == "mutating" and failure["step"] == 4
    saves = [(e["phase"], e.get("step"), e.get("ok"), e.get("reason")) for e in evs
             if e["event"] == "save"]
    assert saves == [("begin", 4, None, None), ("end", 4, True, None)], saves
    assert codes == [EXIT_FAILURE_SAVED]


def test_sigterm_while_the_main_thread_is_inside_leaving_s_event_ends_the_process(tmp_path):
    """Field case (tests/dist/test_hygiene.py, SIGKILL of the harness under CI load): a
    worker's collective failed as SIGTERM arrived; its main thread, in fail ->
    _set_leaving -> Event.set, held the event's condition lock when the SIGTERM
    handler ran on it between two bytecodes and called the same Event.set: the main
    thread waited for itself forever, the watchdog's failure waited for it, and the
    worker outlived its agent. The handler now takes no lock; here it runs while the
    main thread holds that lock, and the watchdog still declares the failure, saves
    and ends the process."""
    codes: list[int] = []
    rt, model, opt = one_rank_runtime(tmp_path, "jit", exit_fn=codes.append)
    try:
        _train(rt, model, opt, 2)
        with rt._leaving._cond:  # what the main thread holds inside Event.set
            signal.raise_signal(signal.SIGTERM)  # the handler runs here, on this thread
            assert rt.leaving
        _wait_for_exit(codes)
    finally:
        rt.close()
    evs = read_events(tmp_path / "ev")
    assert [e["trigger"] for e in evs if e["event"] == "failure"] == ["sigterm"]
    assert [(e["phase"], e.get("step")) for e in evs if e["event"] == "save"] == [
        ("begin", 2), ("end", 2)]
    assert codes == [EXIT_FAILURE_SAVED]


def _state_lock_free(rt: Runtime) -> bool:
    """Whether a failure save on another thread gets the state lock at once (it waits
    ``save_lock_timeout_s`` for it otherwise)."""
    why: list = []

    def save() -> None:
        with rt.consistent_state() as w:
            why.append(w)

    t = threading.Thread(target=save)
    t.start()
    t.join(30)
    return why == [None]


def test_another_thread_s_optimizer_step_never_holds_the_state(tmp_path):
    """Only the training thread's optimizer steps hold the state (only it writes the
    flag of the exclusion): another thread's, at a boundary or inside a step's compute
    phase, holds nothing (a reviewer's finding: asked only outside the compute phase,
    another thread's step wrote the flag, and a save could then read parameters the
    training thread was changing); the training thread's own step then holds it."""
    codes: list[int] = []
    rt, model, opt = one_rank_runtime(tmp_path, "jit", exit_fn=codes.append,
                                      save_lock_timeout_s=0.5)

    def other_thread_steps() -> None:
        t = threading.Thread(target=opt.step)
        t.start()
        t.join(30)

    free: list[bool] = []  # asserted after each step: an exception inside is a failure
    try:
        _train(rt, model, opt, 1)
        other_thread_steps()  # at the boundary after step 1
        free.append(_state_lock_free(rt))
        with rt.step(2):
            model(torch.ones(1, 2)).sum().backward()
            other_thread_steps()  # inside step 2's compute
            free.append(_state_lock_free(rt))
            opt.step()  # the training thread's own: holds the state to the step's end
            free.append(_state_lock_free(rt))
            opt.zero_grad()
        free.append(_state_lock_free(rt))
    finally:
        rt.close()
    assert codes == [] and rt.completed == 2
    assert free == [True, True, False, True]


def test_a_save_only_ever_sees_a_boundary_s_state(tmp_path):
    """The training thread holds the state by a flag, a save by the lock and a flag of
    its own (Dekker's exclusion, runtime/core.py's docstring): a thread saving over and
    over while the training thread steps, its optimizer step's window widened by a
    sleep that lets the saver run, only ever reads parameters equal to those of the
    boundary it reads as completed."""
    codes: list[int] = []
    rt, model, opt = one_rank_runtime(tmp_path, "jit", exit_fn=codes.append,
                                      save_lock_timeout_s=10.0)
    opt.register_step_post_hook(lambda *_: time.sleep(0.001))  # inside the mutating window
    boundaries = {0: model.weight.detach().clone()}
    seen: list[tuple[int, torch.Tensor]] = []
    stop = threading.Event()

    def saver() -> None:
        while not stop.is_set():
            with rt.consistent_state() as why:
                if why is None:
                    seen.append((rt.completed, model.weight.detach().clone()))
            time.sleep(0.0002)

    t = threading.Thread(target=saver)
    t.start()
    try:
        for step in rt.steps(1, 150):
            with rt.step(step):
                model(torch.ones(1, 2)).sum().backward()
                opt.step()
                opt.zero_grad()
            boundaries[step] = model.weight.detach().clone()
    finally:
        stop.set()
        t.join(30)
        rt.close()
    assert codes == [] and rt.completed == 150
    assert len({s for s, _ in seen}) > 5  # the saves interleaved with the steps
    wrong = [s for s, w in seen if not torch.equal(w, boundaries[s])]
    assert wrong == []


def test_an_optimizer_step_waits_for_a_save_that_holds_the_state(tmp_path):
    """A training thread that reaches its optimizer step while a save holds the state
    waits until the save lets go (the save then ends the process, or, in process,
    recovery goes on)."""
    codes: list[int] = []
    rt, model, opt = one_rank_runtime(tmp_path, "jit", exit_fn=codes.append)
    held, events = threading.Event(), []

    def save() -> None:
        with rt.consistent_state() as why:
            events.append(("held", why))
            held.set()
            time.sleep(0.3)
            events.append(("let go", model.weight.detach().clone()))

    try:
        _train(rt, model, opt, 1)
        before = model.weight.detach().clone()
        t = threading.Thread(target=save)
        with rt.step(2):
            model(torch.ones(1, 2)).sum().backward()
            t.start()
            held.wait(10)
            opt.step()  # waits for the save
            events.append(("stepped", None))
            opt.zero_grad()
        t.join(30)
    finally:
        rt.close()
    assert codes == [] and [e[0] for e in events] == ["held", "let go", "stepped"]
    assert events[0][1] is None and torch.equal(events[1][1], before)
    assert not torch.equal(model.weight, before)


def test_a_step_block_is_entered_once(tmp_path):
    """The block rt.step(n) returns begins one step: entering it again (which would
    run step n again and share its info dict, which the step's end event keeps) is
    refused with a clear error, before anything of a step begins."""
    codes: list[int] = []
    rt, model, opt = one_rank_runtime(tmp_path, "jit", exit_fn=codes.append)
    try:
        block = rt.step(1)
        with block as info:
            model(torch.ones(1, 2)).sum().backward()
            opt.step()
            opt.zero_grad()
            info["loss"] = 1.0
        with pytest.raises(RuntimeError, match="entered before"):
            block.__enter__()
    finally:
        rt.close()
    ends = [e for e in read_events(tmp_path / "ev") if e["event"] == "step"]
    assert codes == [] and rt.completed == 1
    assert [(e["phase"], e["step"]) for e in ends] == [("begin", 1), ("end", 1)]
