"""Fault families and the injector.

Each module documents the real failure it stands for, how it is produced and
what the other ranks see: :mod:`~jitbench.faults.process` (kill, term,
segfault, exception, exit), :mod:`~jitbench.faults.collective` (nccl-hang,
nccl-timeout, desync, slow), :mod:`~jitbench.faults.gpu` (xid, over the probes
of :mod:`~jitbench.faults.xid`), :mod:`~jitbench.faults.storage` (enospc, eio,
torn-write, corrupt), :mod:`~jitbench.faults.numeric` (amp-backoff, a
perturbation the reference run keeps), :mod:`~jitbench.faults.network` (partition, link-flap,
link-slow: on namespaced nodes only). :mod:`~jitbench.faults.schedule` turns schedules (at a
step, at a time, every N steps, Poisson arrivals, TOML scenario files) into
concrete :class:`FaultSpec` lists. :data:`FAULTS` maps the CLI name to the class.

Importing this package does not import torch (the fault modules import it
inside the functions that run in a worker), so ``jitbench faults`` and the
spec checks stay light.
"""

from __future__ import annotations

from jitbench.faults.base import Fault, FaultSpec, Injector, Param
from jitbench.faults.collective import (
    DesyncCollective,
    HangCollective,
    SlowRank,
    TimeoutCollective,
)
from jitbench.faults.gpu import SimulateXid
from jitbench.faults.network import FlapLink, PartitionLink, SlowLink
from jitbench.faults.numeric import ForceAmpBackoff
from jitbench.faults.process import (
    ExitProcess,
    KillProcess,
    RaiseException,
    SegfaultProcess,
    TerminateProcess,
)
from jitbench.faults.storage import CorruptCheckpoint, FailStorageIo, FillFilesystem, TearWrite

FAULTS: dict[str, type[Fault]] = {c.name: c for c in (
    KillProcess, TerminateProcess, SegfaultProcess, RaiseException, ExitProcess,
    HangCollective, TimeoutCollective, DesyncCollective, SlowRank,
    SimulateXid,
    FillFilesystem, FailStorageIo, TearWrite, CorruptCheckpoint,
    ForceAmpBackoff, PartitionLink, FlapLink, SlowLink)}

__all__ = ["FAULTS", "Fault", "FaultSpec", "Injector", "Param", "catalog", "make_fault"]


def make_fault(spec: FaultSpec) -> Fault:
    """The live fault for a spec; ``spec.params["at"]`` moves it to another
    injection point (``step``, ``collective``, ``micro:<m>``: before micro-batch
    ``m`` of the accumulation window).

    Raises:
        ValueError: unknown fault kind or invalid parameters (one line).
    """
    try:
        cls = FAULTS[spec.kind]
    except KeyError:
        raise ValueError(f"unknown fault {spec.kind!r}; one of {', '.join(sorted(FAULTS))}"
                         ) from None
    return cls(spec)


def catalog() -> list[dict]:
    """Every fault kind as plain data (``jitbench faults``), ordered by family then name.

    Each row: ``name``, ``family``, ``point`` (where it fires), ``recoverable``,
    ``fails_job``, ``in_reference``, ``summary`` and ``params`` (name -> type, default, doc).
    """
    from jitbench.faults.base import FAMILIES

    order = sorted(FAULTS.items(), key=lambda kv: (FAMILIES.index(kv[1].family), kv[0]))
    return [{"name": n, "family": c.family, "point": c.point, "recoverable": c.recoverable,
             "fails_job": c.fails_job, "in_reference": c.in_reference, "summary": c.summary,
             "params": {k: {"type": p.type.__name__, "default": p.default, "doc": p.doc}
                        for k, p in c.all_params().items()}}
            for n, c in order]
