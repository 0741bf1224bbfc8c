"""The strategy registry: every checkpointing/recovery strategy by name.

Each strategy is one module of this package, holding one class that follows
:class:`jitbench.runtime.strategies.base.Strategy`. This registry names them
without importing them (no torch), so the CLI, the run spec, the sweep and the
model all validate and list strategies from this one table; the runtime loads
the class with :func:`load` when it starts.

Adding a strategy is one new module plus one :data:`REGISTRY` line.

A strategy is written ``NAME`` or ``NAME:ARG`` on the command line, where ARG
is an interval in steps (``periodic:10``) or ``auto`` where the entry allows it
(``periodic:auto``, the Young/Daly interval), followed by the entry's named
integer options, each ``:KEY=VALUE`` (``inmem:2:disk=5``; an option left out
takes the entry's default).

``jit:backstop=N`` is JIT with a low-frequency periodic safety net: rank 0
also writes a synchronous periodic checkpoint every N steps, so a failure that
loses every copy of the JIT checkpoint (the only healthy replica dies while
writing it) restarts from at most N steps back instead of from the newest
older state, which may be step 0 (Gupta et al., "Just-In-Time Checkpointing:
Low Cost Error Recovery from Deep Learning Training Failures", EuroSys 2024,
recommend such a backstop). ``jitbench run --strategy jit --backstop
periodic:N`` is the same choice (:func:`with_backstop`).
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import Any

from jitbench.errors import SpecError, suggest, unknown

__all__ = ["BACKSTOP", "REGISTRY", "Choice", "Entry", "check_available", "load", "names",
           "parse", "usage", "versions", "with_backstop"]

SPLIT = "split"
"""Option of ``jit``: ``jit:split=1`` is ``RuntimeConfig.writer_ranks = "split"``
(:mod:`jitbench.runtime.writers`)."""
BACKSTOP = "backstop"
"""The option of an entry that writes on failure (``jit``) which adds rank 0's
periodic checkpoints every N steps (``jit:backstop=N``; default 0: none)."""


@dataclass(frozen=True)
class Entry:
    """One registered strategy."""

    name: str
    """The name on the command line, in specs and in results tables."""
    target: str
    """``module:Class`` of the implementation (imported only by :func:`load`)."""
    summary: str
    """One line for ``--help`` and the docs."""
    interval: str = "none"
    """``none`` (takes no argument), ``required`` (``NAME:N``), ``optional`` (``NAME``
    means ``NAME:default_interval``) or ``auto`` (``NAME:N`` or ``NAME:auto``)."""
    replay_bound: str = "one"
    """What the strategy promises to replay per failure: ``one`` (at most one
    minibatch), ``interval`` (the steps since its last checkpoint, at most N),
    ``interval-async`` (the steps since its newest *committed* checkpoint: when every
    save succeeded, at most N, or at most 2N - 1 when the failure finds the newest save
    still writing in the background; one save writes at a time, a new one waits for
    it), ``all`` (from
    step 0), ``none`` (survivors never re-execute a committed step)."""
    writes: str = "on_failure"
    """Who writes checkpoint files, and when: ``never``, ``rank0`` (rank 0, on its
    schedule) or ``on_failure`` (the survivors, when a peer fails). Storage faults
    are refused up front where they could never fire."""
    restores: bool = True
    """Whether the job restores from its checkpoint directory (``--ckpt-dir``, default
    ``RUN_DIR/ckpt``) at start and at each restart: the newest valid checkpoint there
    (:func:`jitbench.runtime.checkpoint.newest_valid`). False for a strategy that always
    starts afresh (``none``: from step 0) or heals from a live peer (``torchft``):
    the run's pre-check of a given ``--ckpt-dir`` against the planned faults applies
    only where this is true, and such a strategy that writes nothing there refuses
    ``--ckpt-dir``. The runtime reads it as ``Strategy.reads_checkpoints``."""
    launcher: str = "agent"
    """How the harness starts the job: ``agent`` (one torchrun elastic agent restarts
    the whole group), ``replicas`` (one agent per replica plus hot spares and a
    membership store: :mod:`jitbench.harness.replicas`), ``torchft`` (a Lighthouse plus
    one agent per replica; only the failed replica restarts) or ``ft_launcher`` (NVRx's
    launcher instead of torchrun)."""
    requires: tuple[str, ...] = ()
    """Python modules the strategy needs beyond jitbench's dependencies (an optional
    extra); a missing one refuses the strategy before anything runs (:func:`check_available`)."""
    extra: str = ""
    """The optional extra that installs :attr:`requires` (``pip install -e '.[EXTRA]'``)."""
    promise: str = ""
    """What ``replay_ok`` checks for this strategy, in words (empty: the replay bound)."""
    bitwise: bool = True
    """The recovered run promises the fault-free run's final state bitwise
    (``state_equal`` is judged); False for a peer that trains on with fewer replicas
    (``state_equal`` and ``max_abs_diff`` are reported, not judged)."""
    default_interval: int = 0
    """``interval="optional"``: the interval when ``NAME`` is given without ``:N``."""
    unsupported_faults: tuple[tuple[str, str], ...] = ()
    """``(fault kind, why)`` pairs refused up front for this strategy."""
    options: tuple[tuple[str, int, str], ...] = ()
    """Named integer options, ``(key, default, meaning)``, written ``NAME:N:KEY=VALUE``
    (each value given >= 1; a default may be 0, meaning off, as ``jit``'s
    ``backstop``); the strategy reads them from ``RuntimeConfig.options``."""

    def default_options(self) -> dict[str, int]:
        """``{key: default}`` of :attr:`options`."""
        return {k: v for k, v, _ in self.options}


_NO_CKPT_FILES = tuple((k, "torchft writes no checkpoint files (a replacement heals from a "
                          "live replica over HTTP)") for k in ("enospc", "eio", "torn-write",
                                                                "corrupt"))

REGISTRY: dict[str, Entry] = {e.name: e for e in (
    Entry("jit", "jitbench.runtime.strategies.jit:JustInTime",
          "just-in-time checkpoint by the survivors at the failure, whole-job restart "
          "(jit:backstop=N: also a periodic checkpoint every N steps, the safety net when "
          "every JIT copy is lost)",
          options=((BACKSTOP, 0, "a synchronous periodic checkpoint by rank 0 every N "
                                 "steps under JIT (0: none)"),
                   (SPLIT, 0, "1: the survivors share the JIT checkpoint, each writing 1/R "
                              "of the state (0: each a full copy)"))),
    Entry("jit-inprocess", "jitbench.runtime.strategies.jit_inprocess:JitInProcess",
          "survivors keep their processes; the failed rank is replaced by a spare fed "
          "from a healthy replica", launcher="replicas"),
    Entry("none", "jitbench.runtime.strategies.none:NoCheckpoint",
          "no checkpoints: a failure restarts from step 0", replay_bound="all",
          writes="never", restores=False),
    Entry("periodic", "jitbench.runtime.strategies.periodic:Periodic",
          "synchronous checkpoint every N steps (periodic:auto: Young/Daly interval)",
          interval="auto", replay_bound="interval", writes="rank0"),
    Entry("periodic-async", "jitbench.runtime.strategies.periodic_async:PeriodicAsync",
          "asynchronous checkpoint (DCP async_save) every N steps", interval="required",
          replay_bound="interval-async", writes="rank0",
          promise="the steps since the newest committed checkpoint: when every save "
                  "succeeded, at most N, or 2N - 1 when the failure found the newest "
                  "save still writing"),
    Entry("torchft", "jitbench.runtime.strategies.torchft:TorchFT",
          "torchft: per-step quorum (Lighthouse), survivors go on, the replacement heals "
          "from a survivor", replay_bound="none", writes="never", restores=False,
          launcher="torchft", bitwise=False,
          requires=("torchft",), extra="peers",
          promise="no committed step is executed twice, and the replacement joins at the "
                  "survivors' step with the survivors' state (equal parameters at every "
                  "step after it joins)",
          unsupported_faults=_NO_CKPT_FILES + (
              ("nccl-timeout", "torchft's all-reduce takes the Manager's timeout, not a "
                               "per-operation one"),
              ("desync", "an extra collective on torchft's process group breaks its quorum "
                         "bookkeeping, not the training"),
              ("xid", "the GPU health check belongs to the jitbench runtime, which torchft "
                      "does not run"))),
    Entry("nvrx", "jitbench.runtime.strategies.nvrx:Nvrx",
          "NVIDIA Resiliency Extension: ft_launcher heartbeats detect hangs, in-job restart "
          "from a checkpoint every N steps (nvrx = nvrx:5)", interval="optional",
          default_interval=5, replay_bound="interval", writes="rank0",
          launcher="ft_launcher", requires=("nvidia_resiliency_ext",), extra="peers"),
    Entry("nvrx-sections", "jitbench.runtime.strategies.nvrx:NvrxSections",
          "NVRx ft_launcher with section-based hang detection (a timeout per step section) "
          "instead of heartbeats; checkpoint every N steps (nvrx-sections = nvrx-sections:5)",
          interval="optional", default_interval=5, replay_bound="interval", writes="rank0",
          launcher="ft_launcher", requires=("nvidia_resiliency_ext",), extra="peers"),
    Entry("inmem", "jitbench.runtime.strategies.inmem:InMemory",
          "in-memory checkpoints (Gemini-style): every N steps a copy of the state in the "
          "rank's own host memory and a peer's; recovery in process from a surviving copy, "
          "from disk (every M copies) when none survives", interval="required",
          replay_bound="interval", writes="rank0", launcher="replicas",
          promise="a recovery from memory replays exactly the steps since the last "
                  "in-memory copy (at most N), bitwise; a recovery from disk (no copy "
                  "survived) the steps since the last committed disk checkpoint",
          options=(("disk", 10, "a disk checkpoint every M in-memory copies (jitbench's "
                                "default; Gemini leaves persistent storage to a lower, "
                                "unspecified frequency)"),)),
)}


@dataclass(frozen=True)
class Choice:
    """A strategy as chosen on the command line: name plus its argument."""

    name: str
    """A :data:`REGISTRY` key."""
    interval: int = 0
    """Steps between checkpoints (0: none, or chosen at run time with ``auto``)."""
    auto: bool = False
    """``NAME:auto``: the interval is the Young/Daly optimum, chosen at run time."""
    options: tuple[tuple[str, int], ...] = ()
    """Options given that differ from the entry's defaults, ``(key, value)`` sorted by
    key (so ``inmem:2`` and ``inmem:2:disk=10`` are one choice)."""

    @property
    def entry(self) -> Entry:
        return REGISTRY[self.name]

    def all_options(self) -> dict[str, int]:
        """Every option of the entry: the defaults, overridden by those given."""
        return {**self.entry.default_options(), **dict(self.options)}

    @property
    def backstop(self) -> int:
        """Steps between the backstop's periodic checkpoints (``jit:backstop=N``); 0: none."""
        return int(self.all_options().get(BACKSTOP, 0))

    @property
    def every(self) -> int:
        """Steps between the checkpoints written on a schedule: the interval, else the
        backstop's; 0 when none is (``jit``, ``none``, ``periodic:auto`` before it
        chose)."""
        return self.interval or self.backstop

    @property
    def writers(self) -> tuple[str, ...]:
        """Who writes checkpoint files, and when (:attr:`Entry.writes`, ``never``
        as ``()``): ``("rank0",)``, ``("on_failure",)``, or with a backstop
        ``("rank0", "on_failure")`` (rank 0 every N steps too)."""
        own = () if self.entry.writes == "never" else (self.entry.writes,)
        if self.backstop and "rank0" not in own:
            own = ("rank0", *own)
        return own

    def __str__(self) -> str:
        if self.auto:
            head = f"{self.name}:auto"
        else:
            head = f"{self.name}:{self.interval}" if self.interval else self.name
        return head + "".join(f":{k}={v}" for k, v in self.options)


def names() -> list[str]:
    """Registered strategy names, in registry order."""
    return list(REGISTRY)


def usage() -> str:
    """The accepted forms, for messages and ``--help`` (``jit, none, periodic:N, ...``)."""
    forms = []
    for e in REGISTRY.values():
        opts = "".join(f"[:{k}={'N' if k == BACKSTOP else k[0].upper()}]"
                       for k, _, _ in e.options)
        if e.interval == "none":
            forms.append(e.name + opts)
        elif e.interval == "optional":
            forms += [e.name + opts, f"{e.name}:N{opts}"]
        else:
            forms.append(f"{e.name}:N{opts}")
            if e.interval == "auto":
                forms.append(f"{e.name}:auto")
    return ", ".join(forms)


def parse(text: str) -> Choice:
    """Parse a strategy's command-line form (``jit``, ``periodic:10``, ``periodic:auto``,
    ``inmem:2:disk=5``).

    Raises:
        SpecError: an unknown name, a missing, extra or non-positive interval, an
            option the entry does not take, given twice or below 1 (one line).
    """
    t = str(text).strip().lower()
    m = re.fullmatch(r"([a-z][a-z0-9_-]*)(?::([0-9]+|auto))?((?::[a-z_]+=[^:]*)*)", t)
    entry = REGISTRY.get(m[1]) if m else None
    if entry is not None:
        arg = m[2]
        options = _parse_options(entry, m[3], text)
        choice = None
        if entry.interval == "none" and arg is None:
            choice = Choice(entry.name)
        elif entry.interval == "optional" and arg is None:
            choice = Choice(entry.name, entry.default_interval)
        elif entry.interval != "none" and arg is not None:
            if arg == "auto" and entry.interval == "auto":
                choice = Choice(entry.name, 0, auto=True)
            elif arg != "auto" and int(arg) >= 1:
                choice = Choice(entry.name, int(arg))
        if choice is not None:
            return Choice(choice.name, choice.interval, choice.auto, options)
        if entry.interval == "none" and arg is not None:
            opts = "".join(f" or {entry.name}:{k}=N" for k, _, _ in entry.options)
            raise SpecError(f"strategy {text!r}: {entry.name} takes no interval "
                            f"(use {entry.name}{opts})")
        if arg == "auto":
            raise SpecError(f"strategy {text!r}: only periodic:auto chooses its interval; "
                            f"use {entry.name}:N (N >= 1)")
        if arg is not None:
            raise SpecError(f"strategy {text!r}: the interval N must be an integer >= 1")
        if arg is None:
            raise SpecError(f"strategy {text!r}: {entry.name} needs an interval "
                            f"({entry.name}:N, N >= 1)")
    name, colon, rest = t.partition(":")
    if name in REGISTRY:  # a known name in a form it does not take
        raise SpecError(f"strategy {text!r}: not a form of {name}; use {usage()} (N >= 1)")
    raise SpecError(f"unknown strategy {text!r}; {suggest(name, REGISTRY, colon + rest)}"
                    f"use {usage()} (N >= 1)")


def _parse_options(entry: Entry, text: str, given: str) -> tuple[tuple[str, int], ...]:
    """The ``:KEY=VALUE`` options of ``entry`` in ``text`` that differ from its defaults.

    Raises:
        SpecError: a key the entry does not take, a key given twice, a value that is
            not an integer >= 1 (one line).
    """
    defaults = entry.default_options()
    got: dict[str, int] = {}
    for item in filter(None, text.split(":")):
        key, _, value = item.partition("=")
        if key not in defaults:
            takes = ", ".join(f"{k}=N" for k in defaults) or "no options"
            raise SpecError(f"strategy {given!r}: {entry.name} takes {takes}, not {key!r}")
        if key in got:
            raise SpecError(f"strategy {given!r}: option {key} given twice")
        if not re.fullmatch(r"[0-9]+", value) or int(value) < 1:
            raise SpecError(f"strategy {given!r}: {key} must be an integer >= 1, "
                            f"got {value!r}")
        got[key] = int(value)
    return tuple(sorted((k, v) for k, v in got.items() if v != defaults[k]))


def with_backstop(strategy: str, backstop: str | None) -> Choice:
    """The strategy of ``jitbench run --strategy STRATEGY --backstop periodic:N``:
    ``jit`` with ``periodic:N`` is ``jit:backstop=N`` (``backstop`` None: ``strategy``
    as parsed).

    Raises:
        SpecError: an invalid strategy; a backstop other than ``periodic:N`` with an
            integer N >= 1 (steps); a backstop under a strategy other than ``jit``,
            or one that names a backstop already (one line).
    """
    choice = parse(strategy)
    if backstop is None:
        return choice
    m = re.fullmatch(r"periodic:([0-9]+)", str(backstop).strip().lower())
    if not m or int(m[1]) < 1:
        raise SpecError(f"--backstop takes periodic:N (a synchronous checkpoint every N >= 1 "
                        f"steps), got {backstop!r}")
    if BACKSTOP not in choice.entry.default_options():
        raise SpecError(f"--backstop applies to --strategy jit (a periodic safety net under "
                        f"JIT checkpointing), not {strategy}")
    if choice.backstop:
        raise SpecError(f"--strategy {strategy} names a backstop already; give it once "
                        f"(--strategy jit --backstop {backstop})")
    opts = dict(choice.options)
    opts[BACKSTOP] = int(m[1])
    return Choice(choice.name, choice.interval, choice.auto, tuple(sorted(opts.items())))


def load(name: str) -> type[Any]:
    """The implementation class of a registered strategy (imports its module).

    Raises:
        SpecError: ``name`` is not registered.
    """
    entry = REGISTRY.get(name)
    if entry is None:
        raise SpecError(unknown("strategy", name, REGISTRY))
    module, _, cls = entry.target.partition(":")
    return getattr(importlib.import_module(module), cls)


def check_available(name: str) -> None:
    """Refuse a strategy whose optional extra is not installed (no import: only
    looks the modules up).

    Raises:
        SpecError: one line naming the missing module and the install command.
    """
    import importlib.util

    entry = REGISTRY[name]
    missing = [m for m in entry.requires if importlib.util.find_spec(m) is None]
    if missing:
        raise SpecError(f"strategy {name} needs {', '.join(missing)}, which is not installed: "
                        f"pip install -e '.[{entry.extra}]'")


def versions() -> dict[str, str | None]:
    """Installed versions of every strategy's extra modules (distribution metadata,
    no import): ``{"torchft": "0.2.0", "nvidia-resiliency-ext": None, ...}``."""
    from importlib import metadata

    dists = {"torchft": "torchft", "nvidia_resiliency_ext": "nvidia-resiliency-ext"}
    out: dict[str, str | None] = {}
    for entry in REGISTRY.values():
        for mod in entry.requires:
            dist = dists.get(mod, mod)
            try:
                out[dist] = metadata.version(dist)
            except metadata.PackageNotFoundError:
                out[dist] = None
    return out
