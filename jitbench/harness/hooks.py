"""Hooks on the public PyTorch surface that find a foreign script's steps and collectives.

Installed by :mod:`jitbench.harness.boot` before the script's own code runs,
they need nothing from the script (PyTorch docs: ``torch.optim.Optimizer``,
"Optimizer hooks"; "DDP Communication Hooks"; ``torch.distributed``):

- ``torch.distributed.init_process_group`` is wrapped: with the default
  ``env://`` rendezvous the group is built on jitbench's attempt-keyed store
  (:func:`jitbench.harness.store.attempt_store`) and, where the script gives
  none, with the spec's timeout. Its return ends ``init`` and begins
  ``restore`` (the script's own restore, up to its first step), and attaches
  the fault injector (:func:`jitbench.faults.attach.attach`).
- ``DistributedDataParallel.__init__`` is wrapped: each DDP module gets a
  forward pre-hook (the first forward with gradients enabled after an
  optimizer step begins the next step: injection points ``step`` and
  ``micro:0``; later forwards of the step are ``micro:1``, ...) and a
  communication hook that calls the injector at the first bucket of the
  step (``collective``) and then the default all-reduce
  (:func:`jitbench.runtime.reduce.allreduce_hook`, which honours the
  per-step timeout of ``nccl-timeout``) or the hook the script registers
  itself (``register_comm_hook`` is wrapped too).
- ``torch.optim.optimizer.register_optimizer_step_pre_hook`` (global): the
  ``optimizer`` injection point; ``register_optimizer_step_post_hook``: the
  step ends (``step`` end event with ``dur_s``, s, and ``loss``).
- ``torch.optim.Optimizer.__init__`` is wrapped to know the optimizers, so
  that the first step of a process reads the step the script restored: the
  largest per-parameter ``step`` counter of its optimizers (Adam, AdamW,
  ...); an optimizer without counters (plain SGD) counts from 0, said once in
  a ``warning`` event. A step that only builds the optimizer's state (lr 0
  outside a training step, as DCP's ``set_state_dict`` takes) is no step.
- ``torch.Tensor.backward`` is wrapped to record the loss: the sum over the
  step's backward calls on one-element tensors (the scaled loss where a
  ``GradScaler`` is enabled).

Steps are numbered from 1 across attempts: step ``k`` is the ``k``-th
optimizer step of the training, counted from the restored counter. The first
optimizer that steps defines the steps; another one stepping is ignored, said
once in a ``warning`` event.

Under ``--strategy jit`` they also capture the state a JIT checkpoint needs and
restore it by fast-forwarding the script's loop
(:mod:`jitbench.harness.transparent`).

The hooks drive a :class:`~jitbench.runtime.core.Runtime` under strategy
``none`` (``jit`` under ``--strategy jit``): its watchdog bounds each step (hang detection, ``hang`` failure),
turns the agent's SIGTERM into a ``sigterm`` failure, and polls the peers'
failure notices and the GPU health probe; its failure path logs the failure
and ends the process (exit 76).
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
import weakref
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

from jitbench.faults import FAULTS
from jitbench.faults.attach import Attached, attach
from jitbench.harness.script import EXIT_NOT_TRAINING, STOP_MARKER, ScriptSpec
from jitbench.harness.store import attempt_store
from jitbench.harness.transparent import TransparentJit
from jitbench.runtime import reduce
from jitbench.runtime.core import Runtime
from jitbench.runtime.events import EventLog

__all__ = ["ScriptHooks", "fault_fired_in_attempt"]


def fault_fired_in_attempt(run_dir: Path, attempt: int) -> bool:
    """Whether a fault that fails the job fired (any rank) in ``attempt``: its
    marker (:class:`~jitbench.faults.base.Injector`) names the fault id
    ``kind@rank:step`` and the attempt."""
    for m in (Path(run_dir) / "faults_fired").glob(f"*.attempt{attempt:03d}"):
        cls = FAULTS.get(m.name.split("@", 1)[0])
        if cls is None or cls.fails_job:
            return True
    return False


class ScriptHooks:
    """The hooks of one launched process (see the module docstring).

    Args:
        rt: the runtime (strategy ``none``) whose watchdog and failure path are used.
        events: this rank's event log.
        spec: the launch.
        run_dir: this launch's run directory.
        rank, world, local_rank, attempt: from the agent's environment.
    """

    def __init__(self, rt: Runtime, events: EventLog, spec: ScriptSpec, run_dir: Path,
                 rank: int, world: int, local_rank: int, attempt: int) -> None:
        self.rt, self.events, self.spec, self.run_dir = rt, events, spec, Path(run_dir)
        self.rank, self.world, self.local_rank, self.attempt = rank, world, local_rank, attempt
        self.started = time.monotonic()
        self.completed = 0
        """Optimizer steps completed (counted from the restored one)."""
        self.step = 0
        """The step in progress, or the last completed."""
        self.in_step = False
        self.stepped = False
        """An optimizer step completed in this process."""
        self.optimizer: torch.optim.Optimizer | None = None
        """The first optimizer that stepped (it defines the steps); kept alive for the
        final state."""
        self.ddp: DDP | None = None
        """The last DDP module built (its module is the final state's model)."""
        self.faults: Attached | None = None
        self.jit: TransparentJit | None = None
        """Transparent JIT (``--strategy jit``), else None."""
        self._optimizers: list[weakref.ref] = []
        self._restoring = False
        self.restore_t0 = 0.0
        """When the script's restore began (s, monotonic): its process group's creation."""
        self.begun = False
        """The first step of this process has begun (the script's own restore is over)."""
        self._initializing: torch.optim.Optimizer | None = None
        self._micro = 0
        self._loss: torch.Tensor | None = None
        self._collective_step = -1
        self._warned: set[str] = set()
        self._stop = threading.Event()

    # --------------------------------------------------------------- install
    def install(self) -> None:
        """Install every hook (before the script's code runs) and start the guard
        that gives up on a script reaching no optimizer step within
        ``spec.first_step_s``."""
        register_optimizer_step_pre_hook(self._on_optimizer_pre)
        register_optimizer_step_post_hook(self._on_optimizer_post)
        hooks = self

        opt_init = torch.optim.Optimizer.__init__

        @functools.wraps(opt_init)
        def optimizer_init(opt, *args, **kwargs):
            opt_init(opt, *args, **kwargs)
            hooks._optimizers.append(weakref.ref(opt))

        torch.optim.Optimizer.__init__ = optimizer_init

        pg_init = dist.init_process_group

        @functools.wraps(pg_init)
        def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1,
                               rank=-1, store=None, **kwargs):
            if store is None and init_method in (None, "env://"):
                store = attempt_store(hooks.attempt, hooks.spec.pg_timeout_s)
                init_method = None
                world_size = hooks.world if world_size == -1 else world_size
                rank = hooks.rank if rank == -1 else rank
            else:
                hooks.warn("store", "the script builds its own store or init_method: "
                           "jitbench's attempt-keyed store prefix is not applied")
            if timeout is None:
                timeout = timedelta(seconds=hooks.spec.pg_timeout_s)
            pg_init(backend, init_method=init_method, timeout=timeout, world_size=world_size,
                    rank=rank, store=store, **kwargs)
            hooks._on_process_group()

        dist.init_process_group = init_process_group
        dist.distributed_c10d.init_process_group = init_process_group

        ddp_init = DDP.__init__
        ddp_register = DDP.register_comm_hook

        @functools.wraps(ddp_init)
        def ddp_init_hooked(ddp, *args, **kwargs):
            ddp_init(ddp, *args, **kwargs)
            ddp._jitbench_hooked = False
            ddp.register_forward_pre_hook(hooks._on_forward)
            hooks.ddp = ddp

        @functools.wraps(ddp_register)
        def register_comm_hook(ddp, state, hook):
            ddp_register(ddp, state, hooks._comm_hook(hook))
            ddp._jitbench_hooked = True

        DDP.__init__ = ddp_init_hooked
        DDP.register_comm_hook = register_comm_hook

        backward = torch.Tensor.backward

        @functools.wraps(backward)
        def backward_hooked(tensor, *args, **kwargs):
            if hooks.in_step and tensor.numel() == 1:
                d = tensor.detach().float().reshape(())
                hooks._loss = d if hooks._loss is None else hooks._loss + d
            return backward(tensor, *args, **kwargs)

        torch.Tensor.backward = backward_hooked
        if self.spec.strategy == "jit":
            self.jit = TransparentJit(self)
            self.jit.install()
        threading.Thread(target=self._first_step_guard, name="jitbench-first-step",
                         daemon=True).start()

    def warn(self, key: str, message: str, say: bool = False, inexact: bool = False) -> None:
        """One ``warning`` event per ``key`` (what the hooks cannot follow exactly);
        with ``say``, also one line on stderr (rank 0: the run's ``agent.log``).
        ``inexact``: the run after a restart will not equal the fault-free run, so a
        transparent JIT run promises no bitwise state (summary ``bitwise_promised``)."""
        if key not in self._warned:
            self._warned.add(key)
            self.events.emit("warning", where="hooks", key=key, message=message,
                             inexact=inexact, durable=True)
            if say and self.rank == 0:
                print(f"jitbench: warning: {message}", file=sys.stderr, flush=True)

    def optimizers(self) -> list[torch.optim.Optimizer]:
        """The script's optimizers alive now, in the order it built them."""
        return [o for o in (r() for r in self._optimizers) if o is not None]

    # ----------------------------------------------------------- the process group
    def _on_process_group(self) -> None:
        if self.faults is not None:  # a second init after destroy_process_group
            return
        self.events.emit("init", "end", backend=str(dist.get_backend()))
        self._restoring, self.restore_t0 = True, time.monotonic()
        self.events.emit("restore", "begin", durable=True)
        self.faults = attach(self.rt, self.spec.faults, rank=self.rank, attempt=self.attempt,
                             world_size=self.world, device_index=self.local_rank,
                             backend=str(dist.get_backend()), seed=self.spec.seed,
                             run_dir=self.run_dir, ckpt_dir=self.run_dir / "ckpt",
                             events=self.events,
                             notice_store=attempt_store(self.attempt, 10.0, client=True))

    # ----------------------------------------------------------------- steps
    def restored_step(self) -> int:
        """The optimizer steps the script's state has taken when its first step begins:
        the largest ``step`` counter in its optimizers' state (0: a fresh start, or an
        optimizer that keeps no counter)."""
        best: int | None = None
        counterless = False
        for opt in self.optimizers():
            for st in opt.state.values():
                v = st.get("step") if isinstance(st, dict) else None
                if v is None:
                    counterless = True
                    continue
                n = int(v.item() if hasattr(v, "item") else v)
                best = n if best is None else max(best, n)
        if best is None and counterless:
            self.warn("step_counter", "the optimizer keeps no step counter (e.g. SGD): steps "
                      "are counted from 0 in every attempt, so a script that restores its own "
                      "checkpoint shows as replaying from step 0")
        return best or 0

    def _end_restore(self) -> None:
        """The script's own restore ends where its first step begins."""
        if not self._restoring and self.faults is None:  # no process group: no init end yet
            self.events.emit("init", "end", backend=None)
            self._restoring, self.restore_t0 = True, time.monotonic()
            self.events.emit("restore", "begin", durable=True)
        restored = self.restored_step()
        self.completed = self.step = restored
        if self.jit is not None and self.jit.begin(restored):
            return  # the restore ends where the fast-forward reaches the checkpoint's step
        if restored:
            self.rt.resume_at(restored)
        self.events.emit("restore", "end", step=restored, kind="script" if restored else None,
                         source=None, skipped=[], dur_s=time.monotonic() - self.restore_t0,
                         durable=True)
        self._restoring = False

    def _begin(self) -> None:
        if not self.begun:  # the first step of this process
            self.begun = True
            self._end_restore()
        if self.jit is not None:
            if self.jit.fast_forwarding:
                return
            self.jit.step_begins()
        step = self.completed + 1
        self.step, self.in_step, self._micro, self._loss = step, True, 0, None
        self.rt.begin_step(step)
        if self.faults is not None:
            self.faults.injector.step = step
            self.faults.injector.at("step", step)
            self.faults.injector.at("micro:0", step)

    def _on_forward(self, module: Any, args: Any) -> None:
        if not getattr(module, "_jitbench_hooked", True):
            # no hook of the script's: register the default all-reduce through ours
            module.register_comm_hook(module.process_group, None)
        if not torch.is_grad_enabled():  # evaluation: not part of a training step
            return
        if self.jit is not None and self.jit.fast_forwarding:
            return
        if not self.in_step:
            self._begin()
        else:
            self._micro += 1
            if self.faults is not None:
                self.faults.injector.at(f"micro:{self._micro}", self.step)

    def _comm_hook(self, inner: Any) -> Any:
        """The communication hook registered on a DDP module: the ``collective``
        injection point at the first bucket of each step, then ``inner`` (the
        script's hook) or the default all-reduce (``inner`` None)."""
        hooks = self

        # unannotated: DDP checks the annotations of a hook it is given, and this
        # module's are strings (postponed evaluation)
        def hook(state, bucket):
            step = hooks.step
            faults = hooks.faults
            if hooks._collective_step != step:  # the first bucket of this step
                hooks._collective_step = step
                hooks.rt.enter_collective(step)
                if faults is not None:
                    faults.injector.at("collective", step, numel=bucket.buffer().numel(),
                                       op="all_reduce")
                hooks.rt.mark_collective(step)
            if inner is not None:
                return inner(state, bucket)
            timeout = faults.collective_timeouts.get(step) if faults is not None else None
            return reduce.allreduce_hook(state, bucket, timeout_s=timeout)

        return hook

    @staticmethod
    def initializes_state(opt: torch.optim.Optimizer) -> bool:
        """Whether this optimizer step only initializes the optimizer's state: a step
        outside any training step with every learning rate 0, as DCP's
        ``get_state_dict``/``set_state_dict`` take (``_init_optim_state``: zero
        gradients, lr 0) to build the state a checkpoint is loaded into."""
        lrs = [g.get("lr") for g in opt.param_groups]
        return bool(lrs) and all(lr is not None and float(lr) == 0.0 for lr in lrs)

    def _on_optimizer_pre(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if not self.in_step and self.initializes_state(opt):
            self._initializing = opt
            return
        if self.jit is not None and self.jit.fast_forwarding:
            return
        if self.optimizer is None:
            self.optimizer = opt
        elif opt is not self.optimizer:
            self.warn("optimizers", f"a second optimizer ({type(opt).__name__}) steps too: "
                      f"steps are counted on the first ({type(self.optimizer).__name__}) only",
                      say=self.jit is not None, inexact=self.jit is not None)
            return
        if not self.in_step:  # no DDP forward marked the step's start
            self._begin()
        if self.faults is not None:
            self.faults.injector.at("optimizer", self.step)

    def _on_optimizer_post(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self._initializing is opt:
            self._initializing = None
            return
        if self.jit is not None and self.jit.fast_forwarding:
            if opt is self.optimizer:
                self.jit.optimizer_stepped()
            return
        if opt is not self.optimizer or not self.in_step:
            return
        info = {"loss": float(self._loss)} if self._loss is not None else {}
        self.rt.end_step(self.step, info)
        self.completed, self.in_step, self.stepped = self.step, False, True

    # ------------------------------------------------------------------ end
    def _first_step_guard(self) -> None:
        """Give up (exit :data:`EXIT_NOT_TRAINING`, one ``error`` event) when no
        optimizer step completed within ``spec.first_step_s`` of the start while no
        step is in progress (a step in progress is the watchdog's) and no fault fired
        in this attempt."""
        while not self._stop.wait(0.2):
            if self.stepped:
                return
            waited = time.monotonic() - self.started
            fast_forward = self.jit is not None and self.jit.fast_forwarding
            if self.in_step or fast_forward or waited < self.spec.first_step_s:
                continue
            if fault_fired_in_attempt(self.run_dir, self.attempt):
                return
            self.give_up(EXIT_NOT_TRAINING, "first_step",
                         f"the script reached no optimizer step within {self.spec.first_step_s:g}"
                         " s of its start (--first-step-s): not a training script, or one "
                         "that needs a longer bound")

    def give_up(self, code: int, where: str, error: str, tail: str | None = None) -> None:
        """End this process with ``code`` after an ``error`` event, and tell the
        harness (:data:`~jitbench.harness.script.STOP_MARKER`) not to restart it."""
        self.events.emit("error", where=where, error=error[:500], code=code, tail=tail,
                         durable=True)
        marker = self.run_dir / STOP_MARKER
        try:
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, error.encode()[:2000])
            os.close(fd)
        except FileExistsError:
            pass
        self.events.emit("exit", code=code, durable=True)
        self.events.close()
        os._exit(code)

    def final_state(self) -> dict:
        """The model (the last DDP module's) and optimizer (the first that stepped)
        state at the script's end, for the bitwise ``state_equal`` oracle; under
        transparent JIT also the LR scheduler's and the grad scaler's it saves."""
        state: dict = {}
        if self.ddp is not None:
            state["model"] = self.ddp.module.state_dict()
        elif self.optimizer is not None:
            self.warn("no_ddp", "the script built no DistributedDataParallel module: the final "
                      "state holds the optimizer only")
        # neither: a script that never trained, which the launch names (not a training
        # script); a warning about a final state would only add noise
        if self.optimizer is not None:
            state["optimizer"] = self.optimizer.state_dict()
        if self.jit is not None and self.jit.registered:  # what JIT saves besides
            reg = self.rt.boundary.reg
            for key, obj in (("scheduler", reg.scheduler), ("scaler", reg.scaler)):
                if obj is not None:
                    state[key] = obj.state_dict()
        return state

    def finish(self) -> None:
        """The script returned: stop the guard; a process that ran no step ends its
        restore here (``done`` names the restored step)."""
        self._stop.set()
        if self.jit is not None:
            self.jit.finished()
        if not self.begun:
            self.begun = True
            self._end_restore()
