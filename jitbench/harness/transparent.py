"""Transparent JIT checkpointing of a launched script (``jitbench launch --strategy jit``).

The script is not changed. The hooks of :mod:`jitbench.harness.hooks` already
find its steps; this module adds what a JIT checkpoint needs:

**Capture.** At the script's first step the objects it built are registered
with the :class:`~jitbench.runtime.core.Runtime` (strategy ``jit``): the DDP
module's ``module``, the optimizer that holds its parameters, the LR
scheduler(s) of that optimizer (``torch.optim.lr_scheduler.LRScheduler``
subclasses, found by wrapping their ``__init__``), an enabled AMP
``GradScaler``, and every RNG stream (:mod:`jitbench.runtime.rng`). The
runtime keeps the boundary snapshot current at the end of every optimizer
step (the hooks' step end), and on a failure the survivors save the last
boundary exactly as under ``jitbench run --strategy jit``. The scaler's
boundary value is the one *after* ``GradScaler.update`` (which a script calls
after ``scaler.step``): the snapshot is amended there
(:meth:`~jitbench.runtime.core.Runtime.amend_snapshot`).

**Restore by fast-forward.** A restarted script runs its loop from wherever
it starts by itself (step 0, or its own checkpoint), and its loop counter,
its data iterators, its learning-rate arithmetic and its sampler epochs all
follow that loop. So rather than jumping the state and leaving the loop
behind, jitbench lets the loop *run to* the checkpoint's step ``k`` without
computing anything (:meth:`TransparentJit.begin`):

- the DDP module's ``forward`` returns a cached output of the right
  structure (computed once per distinct input shape, without gradients, on
  the local module), detached leaves that require gradients, so the script's
  loss and ``backward`` run but no parameter gets a gradient and no
  all-reduce is posted;
- ``optimizer.step()`` therefore changes nothing (PyTorch's optimizers skip
  parameters whose ``grad`` is None), and ``GradScaler.step``/``update``
  are passed over; the LR scheduler steps as the script says, so its
  ``last_epoch`` and the learning rates follow the loop;
- a single-process ``DataLoader`` iterator advances its sampler without
  fetching the skipped samples (the batch fetched first in the
  fast-forward stands in for them; a batch of another length is fetched);
  ``DistributedSampler.set_epoch`` runs as the script calls it;
- at the end of the ``k``-th optimizer step, the point in the loop where
  the state was captured, the checkpoint is loaded into the registered
  objects and the RNG streams are set; the script's next batch, drawn
  before its next forward, is drawn from the restored streams.

Step ``k + 1`` then runs for real: at most one minibatch (the one in flight
at the failure) is re-executed, as under ``jitbench run --strategy jit``.

**What the hooks cannot follow** is said once, in one ``warning`` event and
one line on stderr (``jitbench: transparent JIT: ...``), never silently:
no DDP module (nothing is saved: the script recovers as under ``own``); a
second optimizer that steps (its state is not saved); an optimizer without
step counters in a script that restores its own checkpoints (the
fast-forward assumes the loop starts at step 0); ``ReduceLROnPlateau`` (it
reads the loss, which the fast-forward does not compute); a checkpoint
the script writes during the fast-forward (skipped: it would hold the
restored-from state under a later step's name); a multi-process
``DataLoader`` (exact, but its skipped samples are loaded).
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import time
import weakref
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed.checkpoint as dcp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau
from torch.utils._pytree import tree_flatten, tree_map
from torch.utils.data import dataloader

from jitbench.runtime import checkpoint as ckpt
from jitbench.runtime.checkpoint import CheckpointError
from jitbench.runtime.ckpt_format import part_name
from jitbench.runtime.rng import capture_rng, restore_rng

if TYPE_CHECKING:
    from jitbench.harness.hooks import ScriptHooks
    from jitbench.runtime.core import RestoreResult
    from jitbench.runtime.strategies.base import Loaded

__all__ = ["FAST_FORWARD_POSITION", "TransparentJit"]

FAST_FORWARD_POSITION = "the script's own loop, fast-forwarded to the step"
"""The data position a transparent JIT checkpoint records: the script's loop
reaches it again by itself (see the module docstring)."""


class _Schedulers:
    """Several LR schedulers of one optimizer saved and loaded as one (a list of their
    ``state_dict``), in the order they were built."""

    def __init__(self, schedulers: list) -> None:
        self.schedulers = schedulers

    def state_dict(self) -> dict:
        return {"schedulers": [s.state_dict() for s in self.schedulers]}

    def load_state_dict(self, state: dict) -> None:
        saved = state["schedulers"]
        if len(saved) != len(self.schedulers):
            raise ValueError(f"{len(saved)} LR schedulers saved, {len(self.schedulers)} built")
        for s, st in zip(self.schedulers, saved, strict=True):
            s.load_state_dict(st)


def _tensors_key(args: Any, kwargs: Any, training: bool) -> tuple:
    """What decides the structure of a forward's output: shapes and dtypes of the
    tensor inputs, the other inputs' types, and train/eval mode."""
    leaves, spec = tree_flatten((args, kwargs))
    return (str(spec), training, tuple((tuple(x.shape), x.dtype) if isinstance(x, torch.Tensor)
                                       else type(x).__name__ for x in leaves))


def stream_digests() -> dict[str, str]:
    """SHA-256 (first 16 hex digits) of each RNG stream of this process: ``python``,
    ``numpy``, ``torch`` (CPU) and ``cuda`` (every initialised device)."""
    st = capture_rng()
    n = st["numpy"]
    parts = {"python": repr(st["python"]).encode(),
             "numpy": n["key"].numpy().tobytes() + repr((n["pos"], n["has_gauss"],
                                                         n["gauss"])).encode(),
             "torch": st["torch"].numpy().tobytes(),
             "cuda": b"".join(c.numpy().tobytes() for c in st["cuda"])}
    return {k: hashlib.sha256(v).hexdigest()[:16] for k, v in parts.items()}


def _as_leaf(x: Any) -> Any:
    if isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex()):
        return x.detach().clone().requires_grad_(True)
    return x


class TransparentJit:
    """The transparent JIT of one launched process (see the module docstring).

    Args:
        hooks: the process's :class:`~jitbench.harness.hooks.ScriptHooks` (its
            runtime runs strategy ``jit``).
    """

    def __init__(self, hooks: ScriptHooks) -> None:
        self.hooks = hooks
        self.rt = hooks.rt
        self.fast_forwarding = False
        """The loop is being run to the checkpoint's step (nothing is computed)."""
        self.registered = False
        self.disabled: str | None = None
        """Why nothing is saved (no DDP module); None: JIT is on."""
        self.target = 0
        """The checkpoint's step the fast-forward runs to."""
        self.start = 0
        """The step the script's own state was at when the fast-forward began."""
        self.skipped = 0
        """Optimizer steps passed over so far in the fast-forward."""
        self._pending: tuple[Loaded, RestoreResult] | None = None
        self._skip_scaler_update = False
        self._outputs: dict[tuple, Any] = {}
        self._schedulers: weakref.WeakSet = weakref.WeakSet()
        self._scheduler_order: dict[int, int] = {}
        self._scalers: weakref.WeakSet = weakref.WeakSet()
        self.scaler: Any = None
        self.loaded_own = False
        """The script read a checkpoint (``torch.load``, DCP ``load``) before its first step."""
        self._objects_at_begin: tuple | None = None
        self.per_rank: set[str] = set()
        """RNG streams whose state differs between ranks at the first step (seeded per
        rank): a rank restores its own, not the saving survivor's."""
        self.forward_draws: set[str] = set()
        """RNG streams the model's forward draws from (dropout), seen in the fast-forward."""

    # --------------------------------------------------------------- install
    def install(self) -> None:
        """Wrap what the fast-forward and the capture need (before the script runs)."""
        jit = self

        sched_init = LRScheduler.__init__

        @functools.wraps(sched_init)
        def scheduler_init(sched, *args, **kwargs):
            sched_init(sched, *args, **kwargs)
            jit._schedulers.add(sched)
            jit._scheduler_order.setdefault(id(sched), len(jit._scheduler_order))

        LRScheduler.__init__ = scheduler_init
        plateau_init = ReduceLROnPlateau.__init__

        @functools.wraps(plateau_init)
        def plateau_init_hooked(sched, *args, **kwargs):
            plateau_init(sched, *args, **kwargs)
            jit.hooks.warn("plateau", "ReduceLROnPlateau reads the loss, which the "
                           "fast-forward of a restart does not compute: its learning rate "
                           "after a resume may differ from the fault-free run's",
                           say=True, inexact=True)

        ReduceLROnPlateau.__init__ = plateau_init_hooked

        scaler_cls = torch.amp.GradScaler
        scaler_init, scaler_step = scaler_cls.__init__, scaler_cls.step
        scaler_update = scaler_cls.update

        @functools.wraps(scaler_init)
        def grad_scaler_init(scaler, *args, **kwargs):
            scaler_init(scaler, *args, **kwargs)
            jit._scalers.add(scaler)

        @functools.wraps(scaler_step)
        def grad_scaler_step(scaler, optimizer, *args, **kwargs):
            if jit.fast_forwarding and scaler.is_enabled():
                return optimizer.step(*args, **kwargs)  # no gradients: changes nothing
            return scaler_step(scaler, optimizer, *args, **kwargs)

        @functools.wraps(scaler_update)
        def grad_scaler_update(scaler, new_scale=None):
            if scaler.is_enabled() and (jit.fast_forwarding or jit._skip_scaler_update):
                # the restored scale is already the one after this update
                scaler._per_optimizer_states.clear()
                return None
            scaler_update(scaler, new_scale)
            if jit.registered and scaler is jit.scaler:
                jit.rt.amend_snapshot("scaler", scaler.state_dict(), jit.hooks.completed)
            return None

        scaler_cls.__init__ = grad_scaler_init
        scaler_cls.step = grad_scaler_step
        scaler_cls.update = grad_scaler_update

        ddp_forward = DDP.forward

        @functools.wraps(ddp_forward)
        def forward(ddp, *args, **kwargs):
            if jit.fast_forwarding:
                return jit._forward(ddp, args, kwargs)
            return ddp_forward(ddp, *args, **kwargs)

        DDP.forward = forward

        next_data = dataloader._SingleProcessDataLoaderIter._next_data

        @functools.wraps(next_data)
        def next_data_hooked(it):
            if not jit.fast_forwarding or it._dataset_kind != dataloader._DatasetKind.Map:
                return next_data(it)
            index = it._next_index()  # may raise StopIteration, as the original does
            n = len(index) if hasattr(index, "__len__") else 1
            cached = getattr(it, "_jitbench_batch", None)
            if cached is not None and cached[0] == n:
                return cached[1]
            data = it._dataset_fetcher.fetch(index)
            if it._pin_memory:
                data = dataloader._utils.pin_memory.pin_memory(data, it._pin_memory_device)
            it._jitbench_batch = (n, data)
            return data

        dataloader._SingleProcessDataLoaderIter._next_data = next_data_hooked
        multi_init = dataloader._MultiProcessingDataLoaderIter.__init__

        @functools.wraps(multi_init)
        def multi_init_hooked(it, *args, **kwargs):
            multi_init(it, *args, **kwargs)
            jit.hooks.warn("workers", "a DataLoader with worker processes: the fast-forward "
                           "of a restart loads the samples it skips (exact, but not free)")

        dataloader._MultiProcessingDataLoaderIter.__init__ = multi_init_hooked

        dcp.save = self._write(dcp.save, "torch.distributed.checkpoint.save", None)
        dcp.async_save = self._write(dcp.async_save, "torch.distributed.checkpoint.async_save",
                                     None)
        torch.save = self._write(torch.save, "torch.save", 1)
        for module, name in ((dcp, "load"), (torch, "load")):
            setattr(module, name, self._read(getattr(module, name)))

    def _write(self, fn: Any, name: str, path_arg: int | None) -> Any:
        """``fn`` (a checkpoint writer) skipped in the fast-forward, with a warning:
        what it would write is the state of the step the fast-forward started from,
        under a later step's name. ``path_arg``: the position of the file argument
        (``torch.save``: only writes to a path are skipped); None: every call."""
        jit = self

        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            if jit.fast_forwarding:
                target = (args[path_arg] if path_arg is not None and len(args) > path_arg
                          else kwargs.get("f"))
                if path_arg is None or isinstance(target, (str, os.PathLike)):
                    jit.hooks.warn(f"ff_{name}", f"the script wrote a checkpoint ({name}) "
                                   f"while jitbench fast-forwarded it to step {jit.target}: "
                                   f"skipped, as it would hold the state of step {jit.start} "
                                   "under a later step's name", say=True)
                    if name.endswith("async_save"):
                        done: Future = Future()
                        done.set_result(None)
                        return done
                    return None
            return fn(*args, **kwargs)

        return wrapped

    def _read(self, fn: Any) -> Any:
        """``fn`` (a checkpoint reader), noting that the script loads something of its
        own before its first step (its own checkpoint, presumably)."""
        jit = self

        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            if not jit.hooks.begun:
                jit.loaded_own = True
            return fn(*args, **kwargs)

        return wrapped

    # ------------------------------------------------------------- the objects
    def _objects(self) -> tuple[torch.nn.Module, torch.optim.Optimizer, Any, Any] | None:
        """The model, optimizer, scheduler(s) and enabled scaler to save, or None (no
        DDP module or no optimizer of its parameters; said in a warning)."""
        hooks = self.hooks
        if hooks.ddp is None:
            self.disabled = "no DistributedDataParallel module"
            hooks.warn("jit_no_ddp", "the script builds no DistributedDataParallel module: "
                       "transparent JIT needs one, so nothing is saved and the script "
                       "recovers as under --strategy own", say=True, inexact=True)
            return None
        model = hooks.ddp.module
        params = {id(p) for p in model.parameters()}
        opts = [o for o in hooks.optimizers()
                if any(id(p) in params for g in o.param_groups for p in g["params"])]
        if not opts:
            self.disabled = "no optimizer of the DDP module's parameters"
            hooks.warn("jit_no_optimizer", "no optimizer holds the DDP module's parameters: "
                       "nothing is saved", say=True, inexact=True)
            return None
        opt = opts[0]
        if len(opts) > 1:
            hooks.warn("jit_optimizers", f"{len(opts)} optimizers hold the DDP module's "
                       f"parameters: only the first ({type(opt).__name__}) is saved, so the "
                       "run after a restart will not be exact", say=True, inexact=True)
        scheds = sorted((s for s in self._schedulers if getattr(s, "optimizer", None) is opt),
                        key=lambda s: self._scheduler_order.get(id(s), 0))
        inner = {id(c) for s in scheds for c in getattr(s, "_schedulers", ())}
        scheds = [s for s in scheds if id(s) not in inner]  # SequentialLR saves its own
        sched = scheds[0] if len(scheds) == 1 else _Schedulers(scheds) if scheds else None
        scalers = [s for s in self._scalers if s.is_enabled()]
        scaler = scalers[0] if scalers else None
        if len(scalers) > 1:
            hooks.warn("jit_scalers", "several enabled GradScalers: only one is saved",
                       say=True, inexact=True)
        return model, opt, sched, scaler

    def register(self, objects: tuple | None = None) -> None:
        """Hand the objects to the runtime at the boundary the hooks count from."""
        objects = objects or self._objects()
        if objects is None:
            return
        model, opt, sched, scaler = objects
        self.scaler = scaler
        self.rt.resume_at(self.hooks.completed)
        self.rt.register(model, opt, scheduler=sched, scaler=scaler,
                         data_state=lambda step: {"position": FAST_FORWARD_POSITION,
                                                  "step": step})
        self.registered = True

    # ----------------------------------------------------------- fast-forward
    def begin(self, restored: int) -> bool:
        """At the script's first step: find the newest valid checkpoint (rank 0 chooses,
        every rank learns it: a collective) and, when it is newer than the script's own
        state (``restored`` optimizer steps), start the fast-forward to it. Returns
        whether it started; otherwise the objects are registered now.

        Raises:
            CheckpointError: the checkpoint directory is another job's, or the part
                cannot be read (one line; the script fails with it).
        """
        objects = self._objects()
        if objects is None:
            return False
        self.per_rank = self._per_rank_streams()
        loaded, res = self.rt.find_checkpoint()
        if loaded is None or loaded.step <= restored:
            self.register(objects)
            return False
        counterless = any(isinstance(st, dict) and st and "step" not in st
                          for st in objects[1].state.values())
        if counterless and restored == 0 and self.loaded_own:
            self.hooks.warn("jit_counterless", "the optimizer keeps no step counter and the "
                            "script loaded a checkpoint of its own: the fast-forward assumes "
                            "its loop starts at step 0", say=True, inexact=True)
        self._pending = (loaded, res)
        self.start, self.target, self.skipped = restored, loaded.step, 0
        self._objects_at_begin = objects
        self.fast_forwarding = True
        self.hooks.optimizer = objects[1]
        self.hooks.events.emit("fast_forward", "begin", start=restored, target=loaded.step,
                               durable=True)
        return True

    def _forward(self, ddp: DDP, args: tuple, kwargs: dict) -> Any:
        """The DDP module's output in the fast-forward: the cached output for inputs of
        this structure (computed once without gradients), as fresh leaves."""
        key = _tensors_key(args, kwargs, ddp.module.training)
        out = self._outputs.get(key)
        if out is None:
            before = stream_digests()
            with torch.no_grad():
                out = self._outputs[key] = ddp.module(*args, **kwargs)
            after = stream_digests()
            self.forward_draws |= {k for k in before if before[k] != after[k]}
        return tree_map(_as_leaf, out)

    def optimizer_stepped(self) -> None:
        """An optimizer step of the fast-forward ended (it changed nothing); at the
        checkpoint's step, load the checkpoint (the state was captured at this point)."""
        self.skipped += 1
        if self.start + self.skipped < self.target:
            return
        loaded, res = self._pending
        self._pending = None
        self.register(self._objects_at_begin)
        advanced = capture_rng()  # the streams as the script's own loop moved them
        try:
            self.rt.load_checkpoint(loaded, res, rng_now=True)
            if self.per_rank:
                self._own_streams(loaded, advanced)
        except CheckpointError:
            self.fast_forwarding = False
            raise
        self.fast_forwarding = False
        self._skip_scaler_update = True
        self._outputs.clear()
        hooks = self.hooks
        hooks.completed = hooks.step = loaded.step
        hooks.events.emit("fast_forward", "end", step=loaded.step, skipped=self.skipped,
                          durable=True)
        hooks.events.emit("restore", "end", step=res.step, kind=res.kind, source=res.source,
                          skipped=res.skipped, committed=res.committed,
                          dur_s=time.monotonic() - hooks.restore_t0, durable=True)

    def _per_rank_streams(self) -> set[str]:
        """The RNG streams whose state differs between ranks now (one all-gather of
        their digests: every rank calls this at its first step)."""
        import torch.distributed as dist

        mine = stream_digests()
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
            return set()
        every: list = [None] * dist.get_world_size()
        dist.all_gather_object(every, mine)
        return {k for k in mine if len({d[k] for d in every}) > 1}

    def _own_streams(self, loaded: Loaded, advanced: dict) -> None:
        """Set the per-rank streams (:attr:`per_rank`) from this rank's own part of the
        checkpoint's step (a survivor wrote one); a rank without one (the one that
        failed) keeps the streams its fast-forward advanced, exact unless the forward
        draws from them (:attr:`forward_draws`), which is said in a warning.

        Raises:
            CheckpointError: this rank's own part exists but cannot be read.
        """
        rng = capture_rng()  # the loaded part's streams
        own = None
        if (loaded.source or "").startswith(part_name(loaded.kind, loaded.step,
                                                      self.hooks.rank) + "."):
            own = rng
        else:
            part = next((p for p in ckpt.list_parts(self.rt.config.ckpt_dir)
                         if p.step == loaded.step and p.rank == self.hooks.rank
                         and p.kind == loaded.kind), None)
            if part is not None:
                own = ckpt.load_part(part, self.hooks.world, self.rt.config.run_id)[0]["rng"]
        for stream in self.per_rank:
            rng[stream] = own[stream] if own is not None else advanced[stream]
        restore_rng(rng)
        lost = self.per_rank & self.forward_draws
        if own is None and lost:
            self.hooks.warn("rng_lost", f"rank {self.hooks.rank}'s own RNG streams "
                            f"({', '.join(sorted(lost))}) were lost with it and the model's "
                            "forward draws from them: its draws after the restart differ "
                            "from the fault-free run", say=True, inexact=True)

    def step_begins(self) -> None:
        """A real step begins: the scaler's next update is the script's own again."""
        self._skip_scaler_update = False

    def finished(self) -> None:
        """The script returned: a fast-forward still running never reached its target."""
        if self.fast_forwarding:
            self.hooks.warn("ff_unfinished", f"the script ended after {self.skipped} steps of "
                            f"the fast-forward to step {self.target}: its loop ran fewer "
                            "steps than the checkpoint holds", say=True, inexact=True)
            print(f"jitbench: transparent JIT: the script ended before step {self.target}",
                  file=sys.stderr, flush=True)
