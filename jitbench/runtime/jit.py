"""Compatibility re-exports of the runtime's former single module (no code here).

The runtime is split by concern: :mod:`jitbench.runtime.core` (the
:class:`Runtime` facade, :class:`RestoreResult`), :mod:`jitbench.runtime.config`
(:class:`RuntimeConfig`, exit statuses), :mod:`jitbench.runtime.state`
(snapshot, checkpoint form, checks), :mod:`jitbench.runtime.rng`,
:mod:`jitbench.runtime.watchdog` and :mod:`jitbench.runtime.strategies`.
Import from those; this module stays only while ``jitbench.harness.spec``
imports :class:`RuntimeConfig` from here.
"""

from jitbench.runtime.config import EXIT_FAILURE, EXIT_FAILURE_SAVED, RuntimeConfig
from jitbench.runtime.core import RestoreResult, Runtime
from jitbench.runtime.rng import capture_rng, capture_rng_raw, restore_rng, rng_digest, rng_state
from jitbench.runtime.state import REQUIRED_KEYS, check_state

__all__ = ["EXIT_FAILURE", "EXIT_FAILURE_SAVED", "REQUIRED_KEYS", "RestoreResult", "Runtime",
           "RuntimeConfig", "capture_rng", "capture_rng_raw", "check_state", "restore_rng",
           "rng_digest", "rng_state"]
