"""Process faults: the worker process dies, is told to stop, or fails in Python.

Every process fault fires by default where its real counterpart most often
hits (the gradient collective, or the start of the step) and may be moved with
the ``at`` parameter (which every fault but the storage ones takes: ``step``,
``collective``, ``micro:M``) also to ``write`` (during a checkpoint write: a
second fault while the JIT checkpoint is being written) or ``restore`` (while
a checkpoint is loaded at start-up; ``exception`` too).

``kill``
    The most common interruption in large jobs: a GPU or host fault that
    takes the worker process down at once (Llama 3 report, Table 5: faulty
    GPUs and HBM3 memory are ~47% of unexpected interruptions). Produced with
    ``SIGKILL``, which the process cannot handle. Its peers see the gradient
    collective of that step fail ("Connection closed by peer" on gloo) and
    save; the elastic agent sees the worker exit with -9 and SIGTERMs the rest.
``term``
    A preemption or a scheduler stopping the job (Slurm, Kubernetes and
    cloud spot reclaims send SIGTERM and SIGKILL after a grace period).
    Produced with ``os.kill(os.getpid(), SIGTERM)``. The runtime's handler
    forwards it to the watchdog thread, which saves this rank's JIT part
    (the state of the last boundary, or of this step if the optimizer step was
    already running: it waits for it) and exits 75; its peers then see their
    collective fail and save too. The elastic agent's grace period (SIGTERM
    to the survivors, SIGKILL 30 s later in torch 2.14) bounds their saves.
``segfault``
    A crash in native code: a CUDA driver or extension bug, a corrupt
    pointer. Produced with a real invalid memory access,
    ``ctypes.string_at(0)`` (reads address 0), so the kernel delivers a
    genuine SIGSEGV from a faulting instruction (``si_code`` SEGV_MAPERR), as
    in the real failure; ``os.kill(SIGSEGV)`` would only be a signal sent by a
    process. Core dumps are switched off first (``RLIMIT_CORE`` 0: a core
    of a torch process takes seconds and gigabytes). The process dies with
    -11 without running any handler; peers see the collective fail.
``exception``
    A Python exception inside the step: a bug in the loss or the data
    pipeline, a NaN check that raises. Produced by raising
    :class:`InjectedError` (a RuntimeError). The runtime catches it at the
    step boundary, saves this rank's JIT part (the state is the last
    boundary's: nothing was applied) and exits 75; peers see the collective
    fail and save too.
``exit``
    A library or script that calls ``exit(n)`` on an error (NCCL and many
    C libraries abort the process this way). Produced with ``os._exit(code)``
    (no handlers, no flush), default code 1. Peers see the collective fail;
    the agent sees exit status ``code``.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
from typing import Any

from jitbench.faults.base import Fault, Param

_MOVABLE = ("write", "restore")


class InjectedError(RuntimeError):
    """The exception raised by the ``exception`` fault."""


class KillProcess(Fault):
    """SIGKILL the target rank (default: inside the gradient all-reduce of the step)."""

    name = "kill"
    family = "process"
    point = "collective"
    extra_points = _MOVABLE
    summary = "SIGKILL one rank inside the gradient all-reduce of step k (GPU/host crash)"

    def fire(self, ctx: dict[str, Any]) -> None:
        ctx["events"].close()
        os.kill(os.getpid(), signal.SIGKILL)


class TerminateProcess(Fault):
    """SIGTERM the target rank, as a preemption does (the runtime saves and exits)."""

    name = "term"
    family = "process"
    point = "collective"
    extra_points = _MOVABLE
    summary = "SIGTERM one rank at step k, as in a preemption (it saves, then exits)"

    def fire(self, ctx: dict[str, Any]) -> None:
        os.kill(os.getpid(), signal.SIGTERM)


class SegfaultProcess(Fault):
    """A real SIGSEGV from reading address 0 (ctypes), core dumps off."""

    name = "segfault"
    family = "process"
    point = "collective"
    extra_points = _MOVABLE
    summary = "real SIGSEGV (invalid memory read) in one rank at step k (native crash)"

    def fire(self, ctx: dict[str, Any]) -> None:
        try:
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        except (ValueError, OSError):
            pass
        ctx["events"].close()
        ctypes.string_at(0)  # SIGSEGV: the process ends here


class RaiseException(Fault):
    """Raise :class:`InjectedError` inside the step (default: at its start)."""

    name = "exception"
    family = "process"
    point = "step"
    extra_points = ("restore",)
    summary = "a Python exception raised inside step k of one rank (a bug, a bad batch)"

    def fire(self, ctx: dict[str, Any]) -> None:
        raise InjectedError(f"injected fault {self.spec.id} at step {ctx['step']}")


class ExitProcess(Fault):
    """``os._exit(code)`` in the target rank (default: inside the gradient all-reduce)."""

    name = "exit"
    family = "process"
    point = "collective"
    extra_points = _MOVABLE
    summary = "one rank calls exit(code) at step k, no handlers run (library abort)"
    params = {"code": Param(int, 1, "exit status of the process", low=1, high=255)}

    def fire(self, ctx: dict[str, Any]) -> None:
        ctx["events"].close()
        os._exit(self.p["code"])
