"""The bundled JIT checkpointing runtime (usable on its own by user scripts).

It imports nothing from :mod:`jitbench.harness` or :mod:`jitbench.reports`.
Its names are loaded on first use (PEP 562 module ``__getattr__``), so that
``import jitbench.runtime.strategies`` (the strategy registry) and the CLI's
light commands never import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "CheckpointError": "jitbench.runtime.checkpoint",
    "CheckpointWriteError": "jitbench.runtime.checkpoint",
    "EventLog": "jitbench.runtime.events",
    "read_events": "jitbench.runtime.events",
    "EXIT_FAILURE": "jitbench.runtime.config",
    "EXIT_FAILURE_SAVED": "jitbench.runtime.config",
    "RuntimeConfig": "jitbench.runtime.config",
    "RestoreResult": "jitbench.runtime.core",
    "Runtime": "jitbench.runtime.core",
    "rng_digest": "jitbench.runtime.rng",
    "GpuHealth": "jitbench.runtime.health",
    "make_probe": "jitbench.runtime.health",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
