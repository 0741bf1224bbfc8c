"""Fault families and the injector.

Each module documents the real failure it stands for, how it is produced and
what the other ranks see. :data:`FAULTS` maps the CLI name to the class.
"""

from __future__ import annotations

from jitbench.faults.base import Fault, FaultSpec, Injector
from jitbench.faults.collective import HangCollective
from jitbench.faults.process import KillProcess

FAULTS: dict[str, type[Fault]] = {c.name: c for c in (KillProcess, HangCollective)}

__all__ = ["FAULTS", "Fault", "FaultSpec", "Injector", "make_fault"]


def make_fault(spec: FaultSpec) -> Fault:
    """The live fault for a spec; ``spec.params["at"]`` moves it to another
    injection point (``step``, ``collective``, ``micro:<m>``: before micro-batch
    ``m`` of the accumulation window).

    Raises:
        ValueError: unknown fault kind.
    """
    try:
        fault = FAULTS[spec.kind](spec)
    except KeyError:
        raise ValueError(f"unknown fault {spec.kind!r}; one of {', '.join(sorted(FAULTS))}") from None
    if spec.params.get("at"):
        fault.point = str(spec.params["at"])
    return fault
