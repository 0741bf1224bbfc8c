"""Baseline ``none``: no checkpoints; a failure restarts training from step 0."""

from __future__ import annotations

from jitbench.runtime.strategies.base import Strategy

__all__ = ["NoCheckpoint"]


class NoCheckpoint(Strategy):
    """Writes nothing and restores nothing (every hook is the base's no-op)."""

    name = "none"
