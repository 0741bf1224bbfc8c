"""The bundled JIT checkpointing runtime (usable on its own by user scripts).

It imports nothing from :mod:`jitbench.harness` or :mod:`jitbench.reports`.
"""

from jitbench.runtime.checkpoint import CheckpointError, CheckpointWriteError
from jitbench.runtime.events import EventLog, read_events
from jitbench.runtime.jit import (
    EXIT_FAILURE,
    EXIT_FAILURE_SAVED,
    RestoreResult,
    Runtime,
    RuntimeConfig,
)

__all__ = ["EXIT_FAILURE", "EXIT_FAILURE_SAVED", "CheckpointError", "CheckpointWriteError",
           "EventLog", "RestoreResult", "Runtime", "RuntimeConfig", "read_events"]
