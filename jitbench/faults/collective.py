"""Collective faults: a rank misbehaves inside (or around) a collective.

All four fire in the target rank's DDP communication hook, before it posts the
gradient collective of the step (``slow`` at the start of the step), and work
alike on gloo and NCCL.

``nccl-hang``
    A hung NCCL kernel or a dead link (on NVIDIA GPUs often after an Xid or a
    NIC fault): the rank enters the gradient all-reduce and never leaves it.
    Produced by blocking the target rank's comm hook forever. Its peers block
    in the same collective; the runtime's watchdog detects the stall after its
    bound, ``max(hang_floor_s, hang_factor x median step time)``, long before
    the backend's timeout (300 s here, 10 min for NCCL by default).
``nccl-timeout``
    A rank that arrives at a collective later than the collective timeout
    (a straggler stuck in I/O, a long GC pause, a rank restarted late), so
    the collective *fails with a timeout error* on every rank that waited,
    instead of hanging. Produced by sleeping ``delay_s`` in the target rank's
    comm hook while every rank gives the gradient collective of that step a
    per-operation timeout of ``timeout_s`` (gloo's ``AllgatherOptions.timeout``
    / ``AllreduceOptions.timeout``; the process group's own timeout, which
    also bounds connection set-up, stays generous). The waiting ranks get
    "Timed out waiting <ms>ms for send/recv operation to complete" after
    ``timeout_s`` and save; the late rank is then usually still asleep and is
    stopped by the agent's SIGTERM (it saves too); had it arrived it would find
    its peers gone ("Connection closed by peer"), and if ``delay_s`` exceeds
    its own hang bound its watchdog fires first. How it differs from ``nccl-hang``: the backend raises, so detection
    takes ``timeout_s`` and needs no watchdog; it is only distinct from a hang
    while ``timeout_s`` is below the hang bound (checked: ``timeout_s`` must be
    below ``hang_floor_s``). On NCCL the same per-op timeout is what
    ``TORCH_NCCL`` watchdog timeouts enforce (the process group's timeout).
``desync``
    One rank posts a collective its peers do not post (field case C1): a
    missing barrier, a data-dependent branch, an extra logging all-reduce on
    one rank. Produced in the target rank's comm hook, before its gradient
    collective. ``mode=extra``: an all-reduce of ``numel`` floats that nobody
    else posts; gloo matches collectives by order, so the rank waits for its
    all-reduce while its peers wait for the gradient collective: every rank
    blocks, and the watchdog of every rank fires at its hang bound (observed
    on gloo, torch 2.14). ``mode=size``: the same collective as its peers
    (all-gather with the deterministic reduce, else all-reduce) with one
    element fewer; the peers' messages are larger than the rank posted, so
    gloo usually aborts that process (SIGABRT, "op.preamble.length <=
    op.nbytes") and the peers see "Connection reset/closed by peer" and save.
    When a peer's error closes the connections before the larger message is
    read, the rank sees that error instead and saves like the others (both
    outcomes observed on gloo, torch 2.14; the test accepts either).
``slow``
    A straggler: thermal throttling, a noisy neighbour, a slow disk in the
    data path. Produced by sleeping ``delay_s`` at the start of each of
    ``steps`` steps of the target rank. Its peers wait that long in the
    gradient collective. No failure: the watchdog must not fire while the
    delay stays below its bound (checked: ``delay_s`` must be below
    ``hang_floor_s``), and the summary shows the slowdown
    (``slow_window_step_s`` against ``normal_step_s``).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from jitbench.faults.base import Fault, FaultSpec, Param


class HangCollective(Fault):
    """Block the target rank forever inside the first gradient collective of the step."""

    name = "nccl-hang"
    family = "collective"
    point = "collective"
    summary = "one rank blocks forever inside the gradient all-reduce of step k (hung kernel/link)"

    def fire(self, ctx: dict[str, Any]) -> None:
        threading.Event().wait()


class TimeoutCollective(Fault):
    """Arrive ``delay_s`` late at a collective whose timeout is ``timeout_s`` on every rank."""

    name = "nccl-timeout"
    family = "collective"
    point = "collective"
    summary = ("one rank arrives late at the gradient collective of step k; every rank's "
               "collective times out (an error, not a hang)")
    params = {
        "timeout_s": Param(float, 1.0, "per-operation timeout of that collective on every "
                           "rank (s)", low=0.05),
        "delay_s": Param(float, None, "how late the rank arrives (s); default 2 x timeout_s",
                         low=0.0),
    }

    @classmethod
    def check_params(cls, p: dict) -> None:
        if p["delay_s"] is None:
            p["delay_s"] = 2 * p["timeout_s"]
        if p["delay_s"] <= p["timeout_s"]:
            raise ValueError(f"{cls.name}: delay_s ({p['delay_s']:g}) must exceed timeout_s "
                             f"({p['timeout_s']:g}), else nothing times out")

    @classmethod
    def check_run(cls, spec: FaultSpec, run: Any) -> str | None:
        t = cls.resolve(spec.params)["timeout_s"]
        bound = run.hang_floor_s  # the least bound: the first-step one is never below it
        if t >= bound:
            return (f"{cls.name}: timeout_s ({t:g}) must be below the hang bound's floor "
                    f"({bound:g} s), else the watchdog sees a hang first")
        return None

    def fire(self, ctx: dict[str, Any]) -> None:
        time.sleep(self.p["delay_s"])


def collective_timeouts(plan: list[Fault], fired_ids: set[str]) -> dict[int, float]:
    """``{step: timeout_s}``: the per-operation timeout of the gradient collective
    of each step where an ``nccl-timeout`` fault (any rank) has yet to fire.

    Every rank computes it from the plan at start-up, with ``fired_ids`` the
    faults whose markers existed then, so all ranks agree without talking.
    """
    out: dict[int, float] = {}
    for f in plan:
        if isinstance(f, TimeoutCollective) and (f.spec.every_attempt
                                                 or f.spec.id not in fired_ids):
            out[f.spec.step] = min(out.get(f.spec.step, float("inf")), f.p["timeout_s"])
    return out


class DesyncCollective(Fault):
    """Post a collective the peers do not post (``extra``) or a wrong-sized one (``size``)."""

    name = "desync"
    family = "collective"
    point = "collective"
    summary = ("one rank posts an unmatched (extra) or wrong-sized collective at step k "
               "(field case C1)")
    params = {
        "mode": Param(str, "extra", "extra: an all-reduce nobody else posts; size: the "
                      "peers' collective with one element fewer", choices=("extra", "size")),
        "numel": Param(int, 7, "elements of the extra all-reduce (mode extra)", low=1),
    }

    def fire(self, ctx: dict[str, Any]) -> None:
        import torch  # in the worker only: listing faults needs no torch
        import torch.distributed as dist

        if self.p["mode"] == "extra":
            dist.all_reduce(torch.ones(self.p["numel"]))
            return
        n = int(ctx.get("numel", 2))
        n = n - 1 if n > 1 else n + 1
        buf = torch.zeros(n)
        if ctx.get("op", "all_gather") == "all_gather":
            dist.all_gather([torch.empty_like(buf) for _ in range(dist.get_world_size())], buf)
        else:
            dist.all_reduce(buf)


class SlowRank(Fault):
    """Sleep ``delay_s`` at the start of each of ``steps`` steps (a straggler)."""

    name = "slow"
    family = "collective"
    point = "step"
    fails_job = False
    summary = "one rank is delayed delay_s per step for `steps` steps from step k (straggler)"
    params = {
        "delay_s": Param(float, 0.5, "delay added to each slowed step (s)", low=0.0),
        "steps": Param(int, 5, "number of slowed steps", low=1),
    }

    @classmethod
    def check_run(cls, spec: FaultSpec, run: Any) -> str | None:
        p = cls.resolve(spec.params)
        if p["delay_s"] >= run.hang_floor_s:
            return (f"{cls.name}: delay_s ({p['delay_s']:g}) must stay below the hang floor "
                    f"({run.hang_floor_s:g} s); a longer stall is a hang (use nccl-hang)")
        if spec.time_s is None and spec.step + p["steps"] - 1 > run.steps:
            return (f"{cls.name}: the window of {p['steps']} steps from step {spec.step} "
                    f"runs past the last step ({run.steps})")
        return None

    def window_steps(self) -> int:
        return self.p["steps"]

    def fire(self, ctx: dict[str, Any]) -> None:
        time.sleep(self.p["delay_s"])
