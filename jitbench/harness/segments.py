"""Strategy segments of a steady-state overhead run, as the worker applies them.

An overhead run (:mod:`jitbench.harness.overhead`) trains one process through
interleaved segments, each under one strategy; the spec lists them as
``[[first_step, strategy, repeat], ...]`` (:attr:`RunSpec.segments`). The
worker calls :func:`apply_segment` before every step. This module is what
the worker needs of the overhead benchmark, so the worker does not import
the benchmark itself.
"""

from __future__ import annotations

from typing import Any

from jitbench.harness.spec import RunSpec, Strategy
from jitbench.runtime.events import EventLog

__all__ = ["CONTROL", "apply_segment"]

CONTROL = "none-aa"
"""Label of the A/A control segments (the runtime runs them under ``none``)."""


def apply_segment(rt: Any, spec: RunSpec, step: int, events: EventLog) -> None:
    """Switch the runtime's strategy (:meth:`Runtime.set_strategy`) when ``step``
    starts a segment, and log a ``segment`` event."""
    for first, strategy, rep in spec.segments:
        if first == step:
            st = Strategy.parse("none" if strategy == CONTROL else strategy)
            rt.set_strategy(st.name, st.interval, st.all_options())
            events.emit("segment", step=step, strategy=strategy, repeat=rep)
