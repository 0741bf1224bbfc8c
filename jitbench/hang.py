"""The hang-detection settings, declared once.

The runtime's watchdog declares a hang when a step's compute phase runs past
``max(floor_s, factor x median step time)``, or past ``max(first_s, floor_s)``
before any step time is known (:func:`first_bound_s`). The run spec
(:class:`jitbench.harness.spec.RunSpec`), the sweep, the CLI flags and the runtime's config
(``jitbench.runtime.RuntimeConfig``) take their defaults from
:data:`DEFAULT`. This module imports nothing (no torch), so every layer,
the runtime included, may use it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT", "FIRST_S", "FLOOR_S", "FACTOR", "HangSettings", "first_bound_s"]


@dataclass(frozen=True)
class HangSettings:
    """When the watchdog declares a hang (s unless named otherwise)."""

    floor_s: float = 2.0
    """Smallest hang bound: a step's compute phase may always take this long."""
    factor: float = 10.0
    """Hang bound = ``max(floor_s, factor x median step time)`` (dimensionless)."""
    first_s: float = 30.0
    """Hang bound before any step time is known (start-up, the first step); never
    below ``floor_s`` (:func:`first_bound_s`)."""


DEFAULT = HangSettings()
"""The defaults of every layer (spec, sweep, CLI, runtime config)."""
FLOOR_S = DEFAULT.floor_s
FACTOR = DEFAULT.factor
FIRST_S = DEFAULT.first_s


def first_bound_s(first_s: float, floor_s: float) -> float:
    """The hang bound (s) before any step time is known: ``max(first_s, floor_s)``.

    The floor is the least any step may take; a first-step bound below it (say
    ``--hang-first-s 0.0001``) would declare a hang in every attempt's first step,
    so it is raised to the floor rather than refused (a raised floor with the
    default first-step bound is a common setting and must stay valid).
    """
    return max(first_s, floor_s)
