"""The training state at an iteration boundary: snapshot, checkpoint form, checks, loading.

What a checkpoint holds (:data:`REQUIRED_KEYS`; every strategy alike):
``model`` (``state_dict``, buffers from the boundary), ``optimizer`` (all
moments and step counts, hyper-parameters from the boundary), ``scheduler``,
``scaler`` (``GradScaler.state_dict``: scale, growth tracker), ``rng``
(python, numpy, torch CPU, every CUDA device; :mod:`jitbench.runtime.rng`),
``data`` (the workload's position: epoch, position in the epoch, micro-batch,
and the sampler's configuration), ``step`` (optimizer steps completed) and
``extra``. Loading checks every key and fails with
:class:`~jitbench.runtime.checkpoint.CheckpointError` naming what is missing
(never a ``KeyError``).

Parameters and optimizer moments change only inside the optimizer step, so
between the optimizer's pre-hook of step k+1 and the end of step k they equal
boundary k. Everything small that a step may move *outside* the optimizer step
(RNG streams, model buffers such as BatchNorm statistics, the LR scheduler,
the grad scaler, the optimizer's hyper-parameters, the data position, the
user's extra state) is copied into a *snapshot* (:meth:`Boundary.take`); a
checkpoint of boundary k is the live parameters and optimizer moments plus
the snapshot of k (:meth:`Boundary.assemble`).
"""

from __future__ import annotations

import copy
import io
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from jitbench.runtime import rng as _rng
from jitbench.runtime.checkpoint import CheckpointError
from jitbench.runtime.device_copy import BoundaryEvents, cuda_devices
from jitbench.runtime.rng import rng_state
from jitbench.runtime.sharded import globalize, is_sharded, localize, shard_optimizer_state

__all__ = ["REQUIRED_KEYS", "Boundary", "Registered", "apply_state", "check_state", "copy_small",
           "to_bytes"]

REQUIRED_KEYS = ("model", "optimizer", "scheduler", "scaler", "rng", "data", "step", "extra")
"""Top-level keys of every checkpoint state."""


LAZY = "<data_state(step) when assembled>"
"""A snapshot's ``data`` until :meth:`Boundary.assemble` calls ``data_state(step)``: the
data position is a function of the step, so no boundary needs to copy it."""

_ATOMS = frozenset((int, float, bool, str, bytes, type(None), complex))

_NO_CUDA: tuple = ()
"""The CUDA streams of a capture in a process where CUDA is not initialised (shared:
immutable, and the same object at each step, so :meth:`Boundary.take` keeps the
replaced snapshot's RNG tuple)."""


def copy_small(obj: Any) -> Any:
    """A deep copy of a small state value, 3-5x faster than :func:`copy.deepcopy`.

    Dicts and lists are rebuilt, tuples only when they hold something mutable,
    plain tensors without grad are cloned, immutable scalars and strings are shared;
    anything else goes to :func:`copy.deepcopy`. Unlike ``deepcopy`` it keeps
    no memo: an object reachable twice is copied twice and a cycle would not
    end (state dicts of optimizers, schedulers and scalers hold neither; a
    cyclic ``extra_state`` would, so it raises :class:`RecursionError`).
    """
    t = type(obj)
    if t in _ATOMS:
        return obj
    if t is dict:
        if _ATOMS.issuperset(map(type, obj.values())):  # the common case, in C
            return obj.copy()
        return {k: v if type(v) in _ATOMS else copy_small(v) for k, v in obj.items()}
    if t is list:
        if _ATOMS.issuperset(map(type, obj)):  # the common case (lrs, betas), in C
            return obj.copy()
        return [v if type(v) in _ATOMS else copy_small(v) for v in obj]
    if t is tuple:
        if _ATOMS.issuperset(map(type, obj)):  # immutable all through: shared
            return obj
        items = tuple(copy_small(v) for v in obj)
        return obj if all(a is b for a, b in zip(items, obj, strict=True)) else items
    if t is torch.Tensor and not obj.requires_grad:
        return obj.clone()
    return copy.deepcopy(obj)


_SCHEDULER_STATE_DICTS = frozenset(
    f for f in (getattr(torch.optim.lr_scheduler, "LRScheduler", None) and
                torch.optim.lr_scheduler.LRScheduler.state_dict,
                torch.optim.lr_scheduler.LambdaLR.state_dict,
                torch.optim.lr_scheduler.MultiplicativeLR.state_dict) if f is not None)
"""``state_dict`` implementations that read only the scheduler's own fields (every
field but ``optimizer``; ``LambdaLR`` and ``MultiplicativeLR`` also each callable's
``__dict__`` in ``lr_lambdas``): torch's ``LRScheduler`` base class, which most
schedulers (``StepLR``, ``CosineAnnealingLR``, ``ReduceLROnPlateau``, ...) inherit."""


def fields_scheduler(sched: Any) -> type | None:
    """The scheduler's class if its boundary snapshot can be a copy of its fields,
    else None (the snapshot is then a copy of its ``state_dict`` at each boundary).

    A copy of the fields (one ``dict.copy`` of ``__dict__``, in C: about 4 µs per
    step from cold caches against 16-26 µs for ``copy_small(state_dict())``,
    ``benchmarks/runtime-step-cost.txt``) is the boundary's state when the
    scheduler's ``state_dict`` is one of :data:`_SCHEDULER_STATE_DICTS` and its
    fields hold only immutable values, lists or tuples of them (torch's
    schedulers assign ``last_epoch``, ``_last_lr`` and ``_step_count`` anew at
    each ``step``; ``base_lrs`` never changes) and, for ``lr_lambdas``, callables
    whose state changes only inside ``scheduler.step()``. That step runs after
    the optimizer step (the order torch requires), while the training thread holds
    the state (no save reads it), so whenever a snapshot is assembled (at a boundary, or during the next step's
    compute phase) the callables hold the boundary's state. Anything else
    (``SequentialLR`` holding schedulers, ``OneCycleLR``'s phase dicts, a
    scheduler with its own ``state_dict``): None.
    """
    if sched is None or getattr(type(sched), "state_dict", None) not in _SCHEDULER_STATE_DICTS:
        return None
    for key, value in vars(sched).items():
        if key in ("optimizer", "lr_lambdas"):
            continue
        if type(value) in (list, tuple):
            if not _ATOMS.issuperset(map(type, value)):
                return None
        elif type(value) not in _ATOMS:
            return None
    return type(sched)


class _SchedulerFields(dict):
    """A boundary copy of a scheduler's fields (``__dict__``, :func:`fields_scheduler`),
    turned into its ``state_dict`` when a checkpoint is assembled."""

    __slots__ = ()

    def state_dict(self, cls: type) -> dict:
        """What ``cls.state_dict()`` returned at the boundary (a copy): the method
        runs on a bare instance holding these fields."""
        inst = cls.__new__(cls)
        inst.__dict__.update(self)
        return copy_small(cls.state_dict(inst))


@dataclass
class Registered:
    """The objects a training script hands the runtime (:meth:`Runtime.register`)."""

    model: nn.Module | None = None
    """The unwrapped module (``ddp.module``)."""
    optimizer: torch.optim.Optimizer | None = None
    scheduler: Any = None
    """LR scheduler (``state_dict``/``load_state_dict``), optional."""
    scaler: Any = None
    """AMP ``GradScaler``, optional (a disabled one saves ``{}``)."""
    data_state: Callable[[int], dict] | None = None
    """``f(completed_steps) -> dict``: the data position after that many steps. A function
    of its argument only: it is called when a checkpoint is assembled (on the thread
    that saves, possibly during the next step), not at every boundary."""
    extra_state: Callable[[], dict] | None = None
    """User state to save."""
    load_extra: Callable[[dict], None] | None = None
    """Loads the saved extra state back."""
    load_data: Callable[[dict], None] | None = None
    """Positions (or checks) the data loader on restore; raises if it cannot."""


class Boundary:
    """The registered objects and the snapshot of the last iteration boundary.

    ``snapshot`` is the dict of :meth:`take` (None before :meth:`register`):
    ``rng`` (raw, :func:`~jitbench.runtime.rng.capture_rng_raw`, or the
    checkpoint form after a restore), ``buffers`` ({name: tensor copy}),
    ``param_groups`` (hyper-parameters without ``params``), ``scheduler``,
    ``scaler``, ``data``, ``extra`` and ``step``. On CUDA ``device_events``
    holds one event per device recorded at each snapshot
    (:mod:`jitbench.runtime.device_copy`): the GPU work queued before it is
    that boundary's state.
    """

    def __init__(self) -> None:
        self.reg = Registered()
        self.snapshot: dict | None = None
        """The last boundary's snapshot (:meth:`take`); with ``snapshot_each_step`` the
        next step end overwrites its buffers and its image of torch's CPU stream in
        place: convert what must outlive it with :meth:`assemble`."""
        self.device_events = BoundaryEvents([])
        self.sharded = False
        """The model's parameters are DTensors (FSDP2/HSDP): checkpoints hold this rank's
        local shards (:mod:`jitbench.runtime.sharded`)."""
        self._live_buffers: list | None = None  # (name, tensor), cached by _clone_buffers()
        self._buffer_pairs: tuple | None = None  # take(): (snapshot buffers, dst, src)
        self._sched_cls: type | None = None
        """The scheduler's class when its snapshot is a copy of its fields
        (:func:`fields_scheduler`), None when it is a copy of its ``state_dict``."""

    def register(self, reg: Registered, step: int) -> list[str]:
        """Use ``reg`` from now on and snapshot it as the boundary after ``step``.

        Returns:
            Warnings for the event log (an LR lambda that is a plain function:
            ``LambdaLR`` saves a callable object's fields but nothing of a
            function, so a closure over mutable state would come back as built).
        """
        self.reg = reg
        self.sharded = is_sharded(reg.model)
        warnings = []
        if any(isinstance(fn, types.FunctionType)
               for fn in getattr(reg.scheduler, "lr_lambdas", ())):
            warnings.append("an LR lambda is a plain function: its closure is not "
                            "checkpointed (use a callable object, like WarmupCosine)")
        model, optimizer = reg.model, reg.optimizer
        self.device_events = BoundaryEvents(cuda_devices(
            [*model.parameters(), *model.buffers(),
             *(t for st in optimizer.state.values() for t in st.values()
               if isinstance(t, torch.Tensor))]))
        self._sched_cls = fields_scheduler(reg.scheduler)
        self.snapshot = self.take(step)
        return warnings

    def take(self, step: int, rng: dict | None = None, into: dict | None = None) -> dict:
        """Boundary copies of everything small that a step may change outside the
        optimizer step: RNG, buffers, scheduler, scaler, optimizer hyper-parameters,
        extra state; the data position is ``data_state(step)``, computed when the
        snapshot is assembled (:data:`LAZY`).

        The RNG streams are kept raw (converted when a checkpoint is written)
        unless ``rng`` (a checkpoint's) is given. ``into``: the previous
        snapshot (a dict this method made), updated in place and returned (the per-step
        hot path of strategies with ``snapshot_each_step``, :meth:`refresh`): its keys
        are set to this boundary's values, its buffer tensors overwritten with one
        ``torch._foreach_copy_`` and its image of torch's CPU stream (a memoryview of a
        ``bytearray``) too: a snapshot replaced through ``into`` is not a copy to keep
        (convert what must outlive the next step end with :meth:`assemble` while the
        state is held, as every checkpoint does). The buffer list is cached by a call without ``into``:
        buffers must be updated in place, as BatchNorm's are; a script that
        replaces a buffer tensor registers again.

        The buffers, the hyper-parameters and the scheduler are copied here, not in
        methods of their own: each Python call made right after a training step costs several
        µs from cold caches (``benchmarks/runtime-step-cost.txt``, run 5). An
        optimizer group whose values are immutable (numbers, strings, tuples such as
        Adam's ``betas``) is copied with one ``dict.copy`` and a type check of each value (a
        tuple is shared: a scheduler that moves ``betas`` assigns a new one); other
        values (a tensor ``lr``, as ``capturable`` optimizers take; a list) are
        copied with :func:`copy_small`. The scheduler is a copy of its fields where
        :func:`fields_scheduler` allows it (a :class:`_SchedulerFields`, turned into
        its ``state_dict`` by :meth:`assemble`), else a copy of its ``state_dict``.
        """
        r = self.reg
        if rng is None:
            # rng.capture_rng_raw written out (a call costs several µs right after a
            # training step, from cold caches): python's and numpy's unmoved-stream
            # checks inline, torch's CPU stream a copy of its generator's state
            view, raw, py = _rng._py_seen
            if py is None or _rng._PY_INST.gauss_next is not py[2] or view is None or view != raw:
                py = _rng._python_state()
            bg, view, raw, gview, graw, npst = _rng._np_seen
            if (npst is None or _rng._NP_RAND._bit_generator is not bg or view is None
                    or view != raw or gview != graw):
                npst = _rng._numpy_state()
            prev = into["rng"] if into is not None else None
            engine = _rng._torch_engine
            if engine is None:  # the layout was not found: get_state's tensor
                image = _rng._torch_state()
            else:
                # the replaced snapshot's image of torch's stream, overwritten in place
                # through a memoryview of its bytearray: bytes() of the generator, or a
                # bytearray's slice assignment (CPython copies a non-bytearray value
                # first), allocates 2,544 bytes, past pymalloc's small objects: 12-15 µs
                # more per step from cold caches (benchmarks/runtime-step-cost.txt, run 10)
                image = prev[2] if type(prev) is tuple else None
                if type(image) is memoryview:
                    image[:] = engine
                else:
                    image = memoryview(bytearray(engine))
            cuda = _rng._cuda_states() if _rng._CUDA_ON else _NO_CUDA
            # the replaced snapshot's tuple, where no stream's capture is a new object
            rng = (prev if type(prev) is tuple and prev[0] is py and prev[1] is npst
                   and prev[2] is image and prev[3] is cuda else (py, npst, image, cuda))
        live = self._live_buffers
        if into is not None and live is not None and len(into["buffers"]) == len(live):
            buffers = into["buffers"]  # the buffer list is unchanged: copied in place
            if live:
                pairs = self._buffer_pairs
                if pairs is None or pairs[0] is not buffers:
                    pairs = self._buffer_pairs = (buffers, list(buffers.values()),
                                                  [b for _, b in live])
                try:
                    torch._foreach_copy_(pairs[1], pairs[2])
                except (AttributeError, RuntimeError):  # no foreach kernel: one copy each
                    for d, b in zip(pairs[1], pairs[2], strict=True):
                        d.copy_(b)
        else:
            buffers = self._clone_buffers()
        groups = None
        if r.optimizer is not None:
            groups = []
            for g in r.optimizer.param_groups:
                d = g.copy()
                d.pop("params", None)
                # plain loops, not C builtins over map/filter: from cold caches each
                # builtin's first call costs µs, the loop's bytecodes are warm (with
                # the refresh call gone from _end, the snapshot less its RNG capture went
                # from 27.6 to 18.4 µs per step, benchmarks/runtime-step-cost.txt, run 7)
                for k, v in d.items():
                    if type(v) in _ATOMS:
                        continue
                    if type(v) is tuple:
                        for x in v:
                            if type(x) not in _ATOMS:
                                break
                        else:
                            continue  # a tuple of immutable values (Adam's betas): shared
                    d[k] = copy_small(v)  # a tensor lr, a list, a tuple holding a tensor
                groups.append(d)
        sched = r.scheduler
        sched = (None if sched is None else _SchedulerFields(sched.__dict__)
                 if self._sched_cls is not None else copy_small(sched.state_dict()))
        scaler = copy_small(r.scaler.state_dict()) if r.scaler is not None else None
        data = LAZY if r.data_state else {}  # data_state(step) when assembled
        extra = copy_small(r.extra_state()) if r.extra_state else {}
        if into is None:
            into = {"rng": rng, "buffers": buffers, "param_groups": groups, "scheduler": sched,
                    "scaler": scaler, "data": data, "extra": extra, "step": step}
        else:
            # the replaced snapshot, updated in place to what a new one would hold: a new
            # dict of eight keys, and the old one's release, cost several µs per step
            # from cold caches (this take, the RNG tuple kept, 2.0 µs [0.5, 3.2] less than
            # one building a new dict, benchmarks/runtime-step-cost.txt, run 11); every
            # key is set again, so that nothing written into the snapshot since
            # (Runtime.amend_snapshot) outlives its boundary
            into["rng"] = rng
            into["buffers"] = buffers
            into["param_groups"] = groups
            into["scheduler"] = sched
            into["scaler"] = scaler
            into["data"] = data
            into["extra"] = extra
            into["step"] = step
        if self.device_events.events:  # CUDA: the work queued so far is this boundary's state
            self.device_events.mark()
        return into

    def _clone_buffers(self) -> dict:
        """Clones of the model's buffers, their list cached for the in-place copies of
        later snapshots (:meth:`take` with ``into``)."""
        m = self.reg.model
        self._live_buffers = [(n, b.detach()) for n, b in m.named_buffers()] if m else []
        return {n: b.clone() for n, b in self._live_buffers}

    def refresh(self, step: int) -> None:
        """Bring :attr:`snapshot` to the boundary after ``step``, buffers copied in place
        (the per-step hot path of strategies with ``snapshot_each_step``)."""
        self.snapshot = self.take(step, into=self.snapshot)

    def assemble(self, step: int, snapshot: dict, local: bool = True) -> dict:
        """The complete checkpoint state at the boundary after ``step``: live
        parameters and optimizer moments plus ``snapshot`` (tensors are live
        references, not copies).

        A sharded model's (:attr:`sharded`) parameters and moments are this rank's
        local shards (plain tensors, :func:`~jitbench.runtime.sharded.localize`);
        ``local`` False keeps them DTensors (for
        :func:`~jitbench.runtime.sharded.full_state`).

        Raises:
            CheckpointError: ``snapshot`` is of another step.
        """
        r = self.reg
        if snapshot.get("step", step) != step:
            raise CheckpointError(f"snapshot of step {snapshot.get('step')} saved as {step}")
        model_sd = dict(r.model.state_dict())
        for name, b in snapshot["buffers"].items():
            if name in model_sd:
                model_sd[name] = b
        opt_sd = r.optimizer.state_dict()
        rng = snapshot["rng"]
        if snapshot.get("param_groups") is not None:
            opt_sd["param_groups"] = [{**hp, "params": g["params"]} for hp, g in
                                      zip(snapshot["param_groups"], opt_sd["param_groups"],
                                          strict=True)]
        if self.sharded and local:
            model_sd, opt_sd = localize(model_sd), localize(opt_sd)
        sched = snapshot["scheduler"]
        return {
            "model": model_sd,
            "optimizer": opt_sd,
            "scheduler": (sched.state_dict(self._sched_cls) if type(sched) is _SchedulerFields
                          else sched),
            "scaler": snapshot["scaler"],
            "rng": rng_state(rng) if isinstance(rng, tuple) else rng,
            "data": (copy_small(r.data_state(step)) if snapshot["data"] is LAZY
                     else snapshot["data"]),
            "step": step,
            "extra": snapshot["extra"],
        }

    def optimizer_state_keys(self) -> list[str]:
        """Sorted names of every per-parameter optimizer state (``exp_avg``, ``step``, ...)."""
        return sorted({k for s in self.reg.optimizer.state.values() for k in s})


def check_state(state: dict, manifest: dict, step: int, reg: Registered) -> None:
    """Refuse a loaded checkpoint state that is not complete for the registered objects.

    Checks every key of :data:`REQUIRED_KEYS`, the RNG streams, the step, that
    a registered scheduler / enabled scaler / data loader has its saved state,
    and that every parameter's optimizer state holds every moment the
    manifest lists (and every moment any other parameter holds).

    Raises:
        CheckpointError: one line naming what is missing.
    """
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint of step {step} is not a dict")
    missing = [k for k in REQUIRED_KEYS if k not in state]
    if missing:
        raise CheckpointError(f"checkpoint of step {step} lacks {', '.join(missing)}")
    if state["step"] != step:
        raise CheckpointError(f"checkpoint file of step {step} holds step {state['step']}")
    rng = state["rng"]
    lack = [k for k in ("python", "numpy", "torch") if not isinstance(rng, dict) or k not in rng]
    if lack:
        raise CheckpointError(f"checkpoint of step {step} lacks the RNG stream(s) "
                              f"{', '.join(lack)}")
    opt = state["optimizer"]
    if not isinstance(opt, dict) or "state" not in opt or "param_groups" not in opt:
        raise CheckpointError(f"checkpoint of step {step}: optimizer state lacks "
                              "state/param_groups")
    want = set(manifest.get("meta", {}).get("optimizer_state_keys", []))
    for pstate in opt["state"].values():
        want |= set(pstate)
    if want and not opt["state"]:
        raise CheckpointError(f"checkpoint of step {step}: optimizer state is empty, the "
                              f"manifest lists {', '.join(sorted(want))}")
    for idx, pstate in opt["state"].items():
        lack = sorted(want - set(pstate))
        if lack:
            raise CheckpointError(
                f"checkpoint of step {step}: optimizer state of parameter {idx} lacks "
                f"{', '.join(lack)}")
    if reg.scheduler is not None and not isinstance(state["scheduler"], dict):
        raise CheckpointError(f"checkpoint of step {step} has no LR scheduler state "
                              "but a scheduler is registered")
    scaler_on = reg.scaler is not None and getattr(reg.scaler, "is_enabled", lambda: True)()
    saved_scaler = state["scaler"] or {}
    if scaler_on and "scale" not in saved_scaler:
        raise CheckpointError(f"checkpoint of step {step} has no grad-scaler state "
                              "but an enabled GradScaler is registered")
    if not scaler_on and saved_scaler:
        raise CheckpointError(f"checkpoint of step {step} holds grad-scaler state but "
                              "no enabled GradScaler is registered (an AMP run's "
                              "checkpoint)")
    if (reg.data_state is not None or reg.load_data is not None) and not state["data"]:
        raise CheckpointError(f"checkpoint of step {step} has no data position")


def apply_state(reg: Registered, state: dict, manifest: dict, step: int) -> None:
    """Check ``state`` against the registered objects (:func:`check_state`), then load
    it in the order model, optimizer, scheduler, scaler, data, extra (RNG excluded:
    the runtime sets it at the start of the next step).

    Raises:
        CheckpointError: what is missing or does not fit, in one line.
    """
    check_state(state, manifest, step, reg)
    where = "model"
    sharded = is_sharded(reg.model)
    try:
        model_sd = state["model"]
        if sharded:  # a part of this rank's shard: local tensors back into DTensors
            model_sd = globalize(model_sd, reg.model.state_dict())
        reg.model.load_state_dict(model_sd, strict=True)
        where = "optimizer"
        reg.optimizer.load_state_dict(state["optimizer"])
        if sharded:
            shard_optimizer_state(reg.optimizer)
        if reg.scheduler is not None:
            where = "scheduler"
            reg.scheduler.load_state_dict(state["scheduler"])
        if reg.scaler is not None:
            where = "scaler"
            reg.scaler.load_state_dict(state["scaler"])
        if reg.load_data is not None:
            where = "data position"
            reg.load_data(state["data"])
        if reg.load_extra is not None:
            where = "extra state"
            reg.load_extra(state["extra"])
    except CheckpointError:
        raise
    except Exception as exc:  # noqa: BLE001 - a state that does not fit is a bad checkpoint
        msg = " ".join(str(exc).split())[:300]
        raise CheckpointError(
            f"checkpoint of step {step} does not fit the {where}: {type(exc).__name__}: "
            f"{msg}") from exc


def to_bytes(state: dict) -> bytes:
    """``state`` serialised with :func:`torch.save`."""
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()
