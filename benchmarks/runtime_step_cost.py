"""The JIT runtime's own cost per step on the training thread, split by component.

Trains the default GPT (``gpt``, size ``small``, batch 8) in this process, one
rank with no process group (as ``tests/unit/test_state.py`` does), under the
``jit`` strategy, for ``--steps`` steps after ``--warmup`` excluded ones, and
prints per component the median, 10th and 90th percentile over the steps, in
microseconds (µs):

- ``rt_s (end, runtime)``: the ``rt_s`` field of the step-end events, the
  runtime's self-measured step-end cost (lock, snapshot): what ``jitbench
  overhead`` reports as ``runtime/step``;
- ``_begin`` / ``_end``: wall time of :meth:`Runtime._begin` and
  :meth:`Runtime._end` on the training thread, everything included (the event
  lines, ``strategy.at_boundary``); ``optimizer pre-hook``: the runtime's hook
  at the optimizer step (the strategy's ``on_optimizer_step``, the state lock);
  the runtime's whole per-step cost on the training thread is their sum
  (``begin + pre-hook + end``; ``begin + end`` without the hook, as earlier
  tables give it). These rows come from *clean* steps, timed only by these
  three outer timers; every other step is *instrumented* with the inner timers
  below (each a call of its own, several µs from cold caches: ``_end,
  instrumented steps`` shows what they add). Before run 7 every step carried both;
- ``in the step end``: the snapshot (``Boundary.take``, ``Boundary.refresh``
  before run 7) as ``_end`` runs it, on the instrumented steps, and inside it
  each part where it runs: a timer around the RNG capture and,
  inside it, torch's CPU stream (python's and numpy's unmoved-stream checks are
  written out in the capture, not calls, since run 5; since run 9 ``take`` writes
  the capture out too, so on instrumented steps the capture is made first by
  ``capture_rng_raw``, which calls each stream's function, python's, numpy's and
  torch's each timed, and handed to ``take``: the same work plus those calls), and ``the rest`` (the
  buffers' copy, the optimizer hyper-parameters, the LR scheduler, the CUDA
  events' record: written out in ``take``, per step the snapshot's time less the
  RNG capture's); a tree that copies each part in a method gets a timer around
  each: the split of ``rt_s`` by component;
- ``again right after``: the same parts timed once more at the same boundary,
  right after the step (the same calls the runtime makes, repeated outside the
  step), when the caches hold their code and data: ``Boundary.refresh``; the RNG
  capture on its own, as :func:`~jitbench.runtime.rng.capture_rng_raw` makes it
  (each stream's function called, and a new copy of torch's CPU stream, which
  ``refresh`` writes into the image it keeps instead: so this row can exceed
  ``refresh``'s), and torch's CPU stream alone (a new copy); the buffers'
  in-place copy, the optimizer hyper-parameters, the LR scheduler, the data
  position; ``EventLog.step_end`` (``emit`` before run 7) of a
  step-end event (what the training thread pays for one event line) and, for
  reference, what encoding and writing a line costs (``json.dumps``;
  ``os.write`` to a scratch file), the work the event log's writer thread now
  does. ``os.write`` releases the GIL: with the writer thread running, the
  main thread may then wait for it to finish a batch (tens of µs), which shows
  in that line: the price the training thread pays for the writer thread at a
  GIL release, hidden behind torch kernels (which release the GIL too) when
  they are longer than a batch's encoding.

``step (whole, training thread)`` is each measured step's wall time, begin
to end of the ``with rt.step()`` block, for scale.

The timers above measure the runtime's work where it runs. Whether that work
*adds* its time to the training thread, or only takes over a cold-cache cost
that the script's next Python work would pay anyway, is measured side by side
(:func:`added_by_runtime`, ``--ab-rounds``): two identical workloads, one under
an untimed ``jit`` runtime and one under none, alternate in blocks of two steps
in a seeded random order. ``boundary`` is, per block, the time from the last
statement of one step (after ``loss.item()``) to the first statement of the next
(before its batch is fetched): all the runtime does at a step boundary, the
``with`` block's exit and entry included, which the timers around ``_begin`` and
``_end`` miss, plus the loop, which the paired difference (``boundary difference
(paired)``, jit minus none) takes away. Since run 10 its median, with a bootstrap
95% interval, plus the pre-hook's median (inside the step) is the first summary
line: the runtime's whole cost per step on the training thread, measured
directly (a sum of two medians: an estimate, not the median of a sum).
``boundary gap`` runs on to the start of the next step's forward (its batch
fetched, which runs from caches as cold as the runtime's work does, so it also
shows a cold-cache cost the runtime takes over from, or leaves to, the script's
next Python work), and ``gap difference (paired)`` the per-round difference; the
last line gives it the same way: the runtime's added cost per step, noisier by
the batch fetch.

``--device cuda`` trains on the first GPU (the model, its buffers and the
optimizer moments there; the runtime then also records one CUDA event per
boundary, :mod:`jitbench.runtime.device_copy`): the host-side cost on the
training thread, with the step's compute on the GPU instead of on the core that
runs the runtime's Python (on a CPU build the first Python work after a step
runs about 3x slower than the same work right after, from cold caches, with the
tiny GPT as with the default: ``benchmarks/runtime-step-cost.txt``, run 2).
``tests/gpu/device_checks.sh`` runs it on a lent GPU machine.

The header names the machine (CPU, ``nproc``, load average before and after;
the GPU with ``--device cuda``), the commit, Python and torch. Figures are wall
times on a shared machine: compare medians of runs taken at similar load.

``floor: ...`` (:func:`floor`, ``--floor-rounds``): the least any boundary work
costs on the training thread here, measured after steps of the same workload with
no runtime: an empty call; a clock, a flag, torch's CPU RNG copy and one record
(the bare minimum of a JIT boundary); the same with every RNG stream. What the
runtime costs above the last is its hyper-parameters, scheduler, buffers, event
line and bookkeeping; the last itself is the price, on this machine, of a boundary
that keeps the RNG (which no design can defer: the next step's forward draws).

    PYTHONPATH=. python benchmarks/runtime_step_cost.py [--steps 300] [--ab-rounds 60]
        [--floor-rounds 60] [--device cpu|cuda] [--out FILE]

Exit status: 0; 2 for ``--device cuda`` where torch sees no GPU (one line).

To measure another commit, run a copy of this file inside an export of it
(``git archive C | tar -x -C /tmp/c``): the script imports the tree it lies in.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jitbench.runtime import rng as rng_mod  # noqa: E402
from jitbench.runtime import state as state_mod  # noqa: E402
from jitbench.runtime.config import RuntimeConfig  # noqa: E402
from jitbench.runtime.core import Runtime  # noqa: E402
from jitbench.runtime.events import EventLog, events_path, read_events  # noqa: E402
from jitbench.runtime.rng import capture_rng_raw  # noqa: E402

try:  # the small-state copy of the runtime (before it had one: deepcopy)
    from jitbench.runtime.state import copy_small  # noqa: E402
except ImportError:  # pragma: no cover - measuring an older tree
    from copy import deepcopy as copy_small  # noqa: E402
from provenance import git_commit  # noqa: E402

from jitbench.workloads import WorkloadConfig, build_workload  # noqa: E402


def _timed(times: list[float], fn, on: list[bool] | None = None):
    """``fn``, timed into ``times`` (while ``on[0]`` is true, when ``on`` is given)."""
    def wrapper(*a, **kw):
        if on is not None and not on[0]:
            return fn(*a, **kw)
        t0 = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            times.append(time.perf_counter() - t0)
    return wrapper


def _once(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(steps: int, warmup: int, size: str, batch_size: int, tmp: Path,
            device: torch.device = torch.device("cpu")) -> dict:
    """Per-step times (s) of every component, training on ``device``: ``steps`` clean
    and ``steps`` instrumented steps, alternating, after ``warmup`` excluded ones.

    Clean steps carry only the outer timers (``_begin``, the pre-hook, ``_end``):
    they give the runtime's cost per step (``begin + pre-hook + end``). The timers
    inside ``_end`` (around the snapshot, the RNG capture, torch's stream) are
    calls of their own that cost µs each from cold caches, so they are installed
    only for the instrumented steps, which give the split by component
    (``_end, instrumented`` shows what they add)."""
    torch.set_num_threads(1)
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    cfg = WorkloadConfig(name="gpt", size=size, steps=2 * steps + warmup, batch_size=batch_size,
                         extra={"max_bytes": 200_000})
    wl = build_workload(cfg, 0, 1, device)
    events = EventLog(events_path(tmp, 0, 0), 0, 0)
    rt = Runtime(RuntimeConfig(strategy="jit", ckpt_dir=str(tmp / "ckpt"), hang_first_s=600,
                               hang_floor_s=600, sync_bound_s=600, run_id="bench"),
                 events, rank=0, world_size=1, exit_fn=lambda code: None)
    prehook: list[float] = []
    # the optimizer's pre-hook is the bound method taken at register(): time it first
    rt._on_optimizer_step = _timed(prehook, rt._on_optimizer_step)
    rt.register(wl.model, wl.optimizer, wl.scheduler, scaler=wl.scaler,
                data_state=wl.data_state, load_data=wl.load_data_state)
    rt.restore()
    begin: list[float] = []
    end: list[float] = []
    rt._begin = _timed(begin, rt._begin)
    rt._end = _timed(end, rt._end)
    situ: dict[str, list[float]] = {k: [] for k in (
        "in the step end: the snapshot (take)", "  rng capture", "    python's stream",
        "    numpy's stream", "    torch's CPU stream", "  buffers copy",
        "  optimizer hyper-parameters", "  LR scheduler", "  CUDA events record",
        "  the rest (buffers, hyper-parameters, scheduler, ...)")}
    b = rt.boundary
    # the inner timers, as (object, attribute, row): installed for instrumented steps
    # only (module attributes that take() and capture_rng_raw look up at each call;
    # an older tree without them: not split)
    inner = [(b, "take" if _end_takes(rt) else "refresh", "in the step end: the snapshot (take)")]
    if hasattr(state_mod, "capture_rng_raw"):  # a take() that calls the capture (before run 9)
        inner.append((state_mod, "capture_rng_raw", "  rng capture"))
    else:  # take() writes the capture out: on instrumented steps it is called first, timed
        # (installed first, so that the snapshot's timer includes it)
        inner.insert(0, (b, "take", "  rng capture"))
    for mod, name, row in ((rng_mod, "_python_state", "    python's stream"),
                           (rng_mod, "_numpy_state", "    numpy's stream"),
                           (rng_mod, "_torch_state", "    torch's CPU stream"),
                           (torch, "get_rng_state", "    torch's CPU stream")):
        if mod is torch and hasattr(rng_mod, "_torch_state"):
            continue  # the capture no longer calls torch.get_rng_state
        if hasattr(mod, name):
            inner.append((mod, name, row))
    for name, row in (("_buffers", "  buffers copy"), ("_hyper_params", "  optimizer hyper-parameters"),
                      ("_scheduler_state", "  LR scheduler")):
        if hasattr(b, name):  # an older tree's take() has no such parts: not split
            inner.append((b, name, row))
    if b.device_events.events:
        inner.append((b.device_events, "mark", "  CUDA events record"))

    def split(take, times: list[float]):
        """``take``, its RNG capture first made by ``capture_rng_raw`` (the same work as
        the capture take() writes out, plus the call) and timed into ``times``. Since
        run 10 take() writes torch's stream into the image of the snapshot it replaces
        (a memoryview): the capture's copy goes there too, untimed, so that the next
        (clean) step finds an image to overwrite, as every step of a run does."""
        def wrapper(step, rng=None, into=None):
            if rng is None:
                t0 = time.perf_counter()
                rng = capture_rng_raw()
                times.append(time.perf_counter() - t0)
                prev = into["rng"] if into is not None else None
                image = prev[2] if type(prev) is tuple else None
                if type(image) is memoryview and type(rng[2]) is bytes:
                    image[:] = rng[2]
                    rng = (rng[0], rng[1], image, rng[3])
            return take(step, rng=rng, into=into)
        return wrapper

    def install() -> list:
        saved = [(obj, name, obj.__dict__.get(name)) for obj, name, _ in inner]
        for obj, name, row in inner:
            fn = getattr(obj, name)
            setattr(obj, name, split(fn, situ[row]) if obj is b and row == "  rng capture"
                    else _timed(situ[row], fn))
        return saved

    def uninstall(saved: list) -> None:
        for obj, name, fn in saved:
            if fn is None:  # a method: drop the instance attribute (once)
                obj.__dict__.pop(name, None)
            else:
                setattr(obj, name, fn)

    parts: dict[str, list[float]] = {k: [] for k in (
        "again right after: Boundary.refresh",
        "  capture_rng_raw, alone (a new copy of torch's)", "    torch's CPU stream, a new copy",
        "  buffers copy ",
        "  optimizer hyper-parameters ", "  LR scheduler ",
        "  data position (at a save, not per step)", "EventLog.step_end (step end)",
        "  ref: json.dumps of the line", "  ref: os.write of the line")}
    scratch = os.open(tmp / "scratch.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    snap = rt.boundary.snapshot
    bufs = list(snap["buffers"].values())
    live = [b for _, b in wl.model.named_buffers()]
    scratch_log = EventLog(tmp / "scratch-events.jsonl", 0, 0)
    if hasattr(scratch_log, "step_end"):
        def step_event(s: int) -> None:
            scratch_log.step_end(s, time.monotonic(), 0.1, 1e-5, {"loss": 1.0})
    else:  # an older tree: the step-end line went through emit
        def step_event(s: int) -> None:
            scratch_log.emit("step", "end", step=s, dur_s=0.1, rt_s=1e-5, loss=1.0)
    whole: list[float] = []
    clean: dict[str, list[float]] = {"begin": [], "pre": [], "end": []}
    instr_end: list[float] = []
    clean_steps: set[int] = set()
    for step in range(1, 2 * steps + warmup + 1):
        instrumented = step > warmup and (step - warmup) % 2 == 0
        saved = install() if instrumented else None
        t_step = time.perf_counter()
        with rt.step(step) as info:
            loss = wl.loss(wl.model, wl.batch(step, 0))
            loss.backward()
            wl.optimizer.step()
            wl.optimizer.zero_grad(set_to_none=True)
            wl.scheduler.step()
            info.update(loss=loss.item())
        t_whole = time.perf_counter() - t_step
        if saved is not None:
            uninstall(saved)
        if step <= warmup:
            continue
        if instrumented:
            instr_end.append(end[-1])
            continue
        clean_steps.add(step)
        whole.append(t_whole)
        clean["begin"].append(begin[-1])
        clean["pre"].append(prehook[-1])
        clean["end"].append(end[-1])
        # the parts, each on its own at this boundary
        p = parts
        p["again right after: Boundary.refresh"].append(
            _once(lambda s=step: rt.boundary.refresh(s)))
        p["  capture_rng_raw, alone (a new copy of torch's)"].append(_once(capture_rng_raw))
        p["    torch's CPU stream, a new copy"].append(_once(getattr(rng_mod, "_torch_state",
                                                       torch.get_rng_state)))
        if bufs:
            p["  buffers copy "].append(_once(lambda: torch._foreach_copy_(bufs, live)))
        if hasattr(b, "_hyper_params"):  # a tree that copies them in methods of their own
            p["  optimizer hyper-parameters "].append(_once(b._hyper_params))
            p["  LR scheduler "].append(_once(b._scheduler_state))
        p["  data position (at a save, not per step)"].append(_once(lambda s=step: copy_small(wl.data_state(s))))
        p["EventLog.step_end (step end)"].append(_once(lambda s=step: step_event(s)))
        rec = {"event": "step", "phase": "end", "t_wall": time.time(), "t_mono": time.monotonic(),
               "rank": 0, "attempt": 0, "pid": 1, "host": "h", "step": step, "dur_s": 0.1,
               "rt_s": 1e-5, "loss": 1.0}
        p["  ref: json.dumps of the line"].append(_once(lambda r=rec: json.dumps(r)))
        p["  ref: os.write of the line"].append(_once(
            lambda r=rec: os.write(scratch, b'{"event": "step"}\n')))
    rt.finish()
    rt.close()
    events.close()
    scratch_log.close()
    os.close(scratch)
    rts = [e["rt_s"] for e in read_events(tmp) if e["event"] == "step"
           and e["phase"] == "end" and e["step"] in clean_steps]
    # a take() that copies buffers, hyper-parameters and scheduler itself (the runtime's
    # since run 5): the rest of it is its time less the RNG capture's, per step
    whole_take, rng_part = situ["in the step end: the snapshot (take)"], situ["  rng capture"]
    if not situ["  optimizer hyper-parameters"] and len(whole_take) == len(rng_part):
        situ["  the rest (buffers, hyper-parameters, scheduler, ...)"] = [
            w - r for w, r in zip(whole_take, rng_part, strict=True)]
    both = [x + y for x, y in zip(clean["begin"], clean["end"], strict=True)]
    every = [x + h for x, h in zip(both, clean["pre"], strict=True)]
    return {"step (whole, training thread)": whole, "rt_s (end, runtime)": rts,
            "_begin (training thread)": clean["begin"],
            "optimizer pre-hook (training thread)": clean["pre"],
            "_end (training thread)": clean["end"],
            "begin + end (training thread)": both,
            "begin + pre-hook + end": every,
            "_end, instrumented steps": instr_end, **situ, **parts}


def _end_takes(rt: Runtime) -> bool:
    """Whether this tree's ``Runtime._end`` calls ``Boundary.take`` itself (since run 7)
    rather than ``Boundary.refresh``."""
    import inspect

    return "b.take(" in inspect.getsource(type(rt)._end)


AB_ARMS = ("jit", "no runtime")


def added_by_runtime(rounds: int, warmup: int, size: str, batch_size: int, tmp: Path,
                     device: torch.device = torch.device("cpu"), seed: int = 0) -> dict:
    """What the runtime adds to the training thread between two steps, measured side by
    side (A/B) instead of inside its own functions.

    Two identical workloads train in this process, one under a ``jit`` runtime with
    no timers (``jit``), one with none (``no runtime``). Each of ``rounds`` rounds
    (after ``warmup`` excluded ones) runs a block of two consecutive steps of each
    arm, in an order drawn with ``random.Random(seed)``; the *boundary gap* of a
    block is the wall time from the end of its first step's own work (after
    ``loss.item()``) to the start of its second step's forward (its batch fetched):
    the runtime's step end and begin, the loop, and the batch fetch, which runs from
    caches as cold as the runtime's work does. Whatever the runtime's share of the
    cold-cache cost, its cost is the paired difference of the gaps. The *boundary*
    of a block stops at the second step's first statement, before the batch fetch:
    the runtime's whole boundary (the ``with`` block's exit and entry, ``_end``,
    ``_begin``) and the loop, without the fetch's variance.

    Returns:
        ``{"boundary, jit": [s], "boundary, no runtime": [s], "boundary difference
        (paired)": [s], "boundary gap, jit": [s], "boundary gap, no runtime": [s],
        "gap difference (paired)": [s]}``, one value per measured round.
    """
    torch.manual_seed(0)
    cfg = WorkloadConfig(name="gpt", size=size, steps=4 * (rounds + warmup) + 2,
                         batch_size=batch_size, extra={"max_bytes": 200_000})
    wls = {arm: build_workload(cfg, 0, 1, device) for arm in AB_ARMS}
    (tmp / "ab").mkdir()
    events = EventLog(events_path(tmp / "ab", 0, 0), 0, 0)
    rt = Runtime(RuntimeConfig(strategy="jit", ckpt_dir=str(tmp / "ab" / "ckpt"),
                               hang_first_s=600, hang_floor_s=600, sync_bound_s=600,
                               run_id="bench-ab"),
                 events, rank=0, world_size=1, exit_fn=lambda code: None)
    w = wls["jit"]
    rt.register(w.model, w.optimizer, w.scheduler, scaler=w.scaler,
                data_state=w.data_state, load_data=w.load_data_state)
    rt.restore()

    def work(wl, step: int) -> tuple[float, float, float]:
        t_in = time.perf_counter()  # the step's first statement
        b = wl.batch(step, 0)
        t_fwd = time.perf_counter()
        loss = wl.loss(wl.model, b)
        loss.backward()
        wl.optimizer.step()
        wl.optimizer.zero_grad(set_to_none=True)
        wl.scheduler.step()
        loss.item()
        # the step's tensors freed here, not in the boundary (where their buffers' frees
        # would add 100-300 us of variance to both arms alike)
        del loss, b
        return t_in, t_fwd, time.perf_counter()

    def jit_step(step: int) -> tuple[float, float, float]:
        with rt.step(step):
            out = work(wls["jit"], step)
        return out

    steps = {"jit": jit_step, "no runtime": lambda step: work(wls["no runtime"], step)}
    done = dict.fromkeys(AB_ARMS, 0)
    gaps: dict[str, list[float]] = {arm: [] for arm in AB_ARMS}
    edges: dict[str, list[float]] = {arm: [] for arm in AB_ARMS}
    order = random.Random(seed)
    for _ in range(rounds + warmup):
        for arm in order.sample(AB_ARMS, len(AB_ARMS)):
            _, _, t_end = steps[arm](done[arm] + 1)
            t_in, t_fwd, _ = steps[arm](done[arm] + 2)
            done[arm] += 2
            gaps[arm].append(t_fwd - t_end)
            edges[arm].append(t_in - t_end)
    rt.finish()
    rt.close()
    events.close()
    a, b = (gaps[arm][warmup:] for arm in AB_ARMS)
    ea, eb = (edges[arm][warmup:] for arm in AB_ARMS)
    return {"boundary, jit": ea, "boundary, no runtime": eb,
            "boundary difference (paired)": [x - y for x, y in zip(ea, eb, strict=True)],
            "boundary gap, jit": a, "boundary gap, no runtime": b,
            "gap difference (paired)": [x - y for x, y in zip(a, b, strict=True)]}


FLOOR_PROBES = ("floor: an empty call",
                "floor: clock + flag + torch's CPU RNG copy + a record",
                "floor: clock + flag + every RNG stream + a record")


def floor(rounds: int, warmup: int, size: str, batch_size: int,
          device: torch.device = torch.device("cpu"), seed: int = 0) -> dict:
    """The least any boundary work costs on the training thread here: the same workload
    with no runtime, and right after each step's own work (after ``loss.item()``, as
    :func:`added_by_runtime`'s gap starts) one probe, timed once, from the caches the
    step left. The probes, drawn per step in an order from ``random.Random(seed)``,
    each timed on ``rounds`` steps after ``warmup`` excluded ones:

    - an empty call (the timer pair and one Python call);
    - a clock read, a flag set and cleared on an object (how the training thread
      holds the state since run 10; the acquire and release of a lock before), a copy
      of torch's CPU RNG state as the runtime takes it (since run 10 its generator's
      2,544 bytes copied into an image kept from the step before, through a
      memoryview; in run 9 a new ``bytes`` of them,
      :func:`jitbench.runtime.rng._torch_state`; before, ``get_state``'s 5,056-byte
      tensor) and one tuple appended to a deque: the bare minimum of a JIT boundary
      (holding the state, the RNG, a record of the step end), without the
      hyper-parameters, scheduler, buffers or the event line;
    - the same with every RNG stream, read as ``Boundary.take`` reads them, in one call
      (python's and numpy's unmoved-stream checks, the CUDA check; before run 9,
      :func:`jitbench.runtime.rng.capture_rng_raw`, which did the same).

    Returns:
        ``{probe name: [s]}`` (:data:`FLOOR_PROBES`), ``rounds`` values each.
    """
    import collections
    import types

    if not hasattr(rng_mod, "_CUDA_ON"):  # a tree before run 11: its CUDA check, as a flag
        rng_mod._CUDA_ON = not rng_mod._CUDA_FLAGGED or bool(torch.cuda._initialized)

    torch.manual_seed(0)
    n = len(FLOOR_PROBES)
    cfg = WorkloadConfig(name="gpt", size=size, steps=n * (rounds + warmup) + 1,
                         batch_size=batch_size, extra={"max_bytes": 200_000})
    wl = build_workload(cfg, 0, 1, device)
    holder = types.SimpleNamespace(mutating=False)  # the training thread's flag
    record, clock = collections.deque(maxlen=64), time.monotonic
    # torch's CPU stream as the runtime copies it: its generator's state into an image
    # kept from the last step since run 10, get_state's tensor where the layout is not
    # found (and before run 9)
    fallback = getattr(rng_mod, "_torch_state", torch.default_generator.get_state)
    fallback()
    engine = getattr(rng_mod, "_torch_engine", None)
    image = memoryview(bytearray(engine)) if engine is not None else None

    def torch_state():
        if image is None:
            return fallback()
        image[:] = engine
        return image

    if engine is not None:
        def every_stream() -> tuple:
            """What Boundary.take reads of the RNG streams, one call (take writes it out)."""
            r = rng_mod
            view, raw, py = r._py_seen
            if py is None or r._PY_INST.gauss_next is not py[2] or view is None or view != raw:
                py = r._python_state()
            bg, view, raw, gview, graw, npst = r._np_seen
            if (npst is None or r._NP_RAND._bit_generator is not bg or view is None
                    or view != raw or gview != graw):
                npst = r._numpy_state()
            return py, npst, torch_state(), r._cuda_states() if r._CUDA_ON else ()
    else:  # before run 9 the capture was this call, its checks written out in it
        every_stream = capture_rng_raw

    def empty() -> None:
        pass

    def bare() -> None:
        t = clock()
        holder.mutating = True
        state = torch_state()
        holder.mutating = False
        record.append((t, state))

    def streams() -> None:
        t = clock()
        holder.mutating = True
        state = every_stream()
        holder.mutating = False
        record.append((t, state))

    probes = dict(zip(FLOOR_PROBES, (empty, bare, streams), strict=True))
    out: dict[str, list[float]] = {k: [] for k in FLOOR_PROBES}
    order = random.Random(seed)
    step = 0
    for r in range(rounds + warmup):
        for name in order.sample(FLOOR_PROBES, n):
            step += 1
            loss = wl.loss(wl.model, wl.batch(step, 0))
            loss.backward()
            wl.optimizer.step()
            wl.optimizer.zero_grad(set_to_none=True)
            wl.scheduler.step()
            loss.item()
            t0 = time.perf_counter()
            probes[name]()
            if r >= warmup:
                out[name].append(time.perf_counter() - t0)
    return out


def median_ci(xs: list[float], resamples: int = 2000, seed: int = 0,
              level: float = 0.95) -> tuple[float, float, float]:
    """The median of ``xs`` and its percentile-bootstrap interval (``resamples``
    draws with replacement, ``numpy.random.default_rng(seed)``), in ``xs``' unit."""
    arr = np.asarray(xs, dtype=float)
    draws = np.random.default_rng(seed).choice(arr, size=(resamples, arr.size))
    meds = np.median(draws, axis=1)
    a = (1.0 - level) / 2.0
    return float(np.median(arr)), float(np.quantile(meds, a)), float(np.quantile(meds, 1 - a))


def _cpu() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def _gpu(device: torch.device) -> str:
    if device.type != "cuda":
        return ""
    return f", GPU {torch.cuda.get_device_name(device)}, CUDA {torch.version.cuda}"


def report(times: dict, steps: int, size: str, batch_size: int, load0, load1,
           device: torch.device = torch.device("cpu")) -> str:
    """The table: median, p10, p90 per component (µs)."""
    w = max([40, *(len(k) for k, xs in times.items() if xs)])  # the label column
    head = [f"# runtime step cost: {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, "
            f"commit {git_commit()}, Python {platform.python_version()}, torch {torch.__version__}",
            f"# machine: {_cpu()}, nproc {os.cpu_count()}, load average (1/5/15 min) "
            f"{' '.join(f'{x:.2f}' for x in load0)} before, "
            f"{' '.join(f'{x:.2f}' for x in load1)} after{_gpu(device)}",
            f"# gpt {size}, batch {batch_size}, strategy jit, device {device.type}, 1 rank in process, "
            f"{steps} measured steps; microseconds per step",
            f"{'component':{w}s} {'median':>8s} {'p10':>8s} {'p90':>8s} {'n':>5s}"]
    for k, xs in times.items():
        if not xs:
            continue
        us = sorted(x * 1e6 for x in xs)
        q = statistics.quantiles(us, n=10) if len(us) > 1 else [us[0]] * 9
        head.append(f"{k:{w}s} {statistics.median(us):8.1f} {q[0]:8.1f} {q[8]:8.1f} {len(us):5d}")
    pre = times.get("optimizer pre-hook (training thread)") or [0.0]
    pre_us = statistics.median(pre) * 1e6
    edge = times.get("boundary difference (paired)")
    if edge:
        med, lo, hi = (x * 1e6 for x in median_ci(edge))
        head.append(f"# the runtime's cost per step on the training thread, whole (A/B, "
                    f"{len(edge)} paired rounds): its step boundary, the last statement of a "
                    f"step to the first of the next, median {med:.1f} us, 95% bootstrap "
                    f"interval [{lo:.1f}, {hi:.1f}]; with the optimizer pre-hook's "
                    f"{pre_us:.1f} us: {med + pre_us:.1f} us per step")
    diff = times.get("gap difference (paired)")
    if diff:
        med, lo, hi = (x * 1e6 for x in median_ci(diff))
        head.append(f"# added by the runtime between two steps (A/B, {len(diff)} paired rounds): "
                    f"median {med:.1f} us, 95% bootstrap interval [{lo:.1f}, {hi:.1f}]; with the "
                    f"optimizer pre-hook's {pre_us:.1f} us: {med + pre_us:.1f} us per step")
    return "\n".join(head) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=300, help="measured steps")
    ap.add_argument("--warmup", type=int, default=20, help="excluded first steps")
    ap.add_argument("--size", default="small", help="gpt size (default: the default, small)")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--ab-rounds", type=int, default=60,
                    help="paired rounds of the A/B boundary-gap measurement (0: skip it)")
    ap.add_argument("--floor-rounds", type=int, default=60,
                    help="steps per probe of the floor measurement (0: skip it)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="train on the CPU or on the first GPU (default cpu)")
    ap.add_argument("--out", type=Path, help="also append the table to this file")
    a = ap.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda: torch sees no GPU here", file=sys.stderr)
        return 2
    device = torch.device("cuda", 0) if a.device == "cuda" else torch.device("cpu")
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory() as d:
        times = measure(a.steps, a.warmup, a.size, a.batch_size, Path(d), device)
        if a.ab_rounds > 0:
            times.update(added_by_runtime(a.ab_rounds, max(1, a.warmup // 4), a.size,
                                          a.batch_size, Path(d), device))
        if a.floor_rounds > 0:
            times.update(floor(a.floor_rounds, max(1, a.warmup // 4), a.size, a.batch_size,
                               device))
    text = report(times, a.steps, a.size, a.batch_size, load0, os.getloadavg(), device)
    print(text, end="")
    if a.out:
        with open(a.out, "a", encoding="utf-8") as fh:
            fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
