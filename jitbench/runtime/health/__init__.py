"""GPU health for the runtime: the Xid table, the probe protocol, NVML, the watchdog check.

- :mod:`~jitbench.runtime.health.xid`: what each NVIDIA Xid code means and
  whether the rank must leave (sources: NVIDIA's Xid catalog and memory-error
  documents).
- :mod:`~jitbench.runtime.health.probe`: :class:`GpuEvent`, the
  :class:`HealthProbe` interface, :class:`SilentProbe`.
- :mod:`~jitbench.runtime.health.nvml`: :class:`NvmlProbe` (real events) and
  :func:`make_probe` (NVML, or a fallback that says why).
- :mod:`~jitbench.runtime.health.check`: :class:`GpuHealth`, the check the
  runtime's watchdog polls (``rt.add_check(GpuHealth(probe, events))``).

Nothing here imports torch. Simulated Xids (the ``xid`` fault) are
:mod:`jitbench.faults.xid`'s, delivered through the same interface.
"""

from jitbench.runtime.health.check import GpuHealth
from jitbench.runtime.health.nvml import PROBE_ENV, NvmlProbe, make_probe
from jitbench.runtime.health.probe import (
    GpuEvent,
    HealthProbe,
    ProbeUnavailable,
    SilentProbe,
    empty_snapshot,
)
from jitbench.runtime.health.xid import FATAL_XIDS, SBE_INFO, XID_TABLE, XidInfo, describe_xid

__all__ = ["FATAL_XIDS", "PROBE_ENV", "SBE_INFO", "XID_TABLE", "GpuEvent", "GpuHealth",
           "HealthProbe", "NvmlProbe", "ProbeUnavailable", "SilentProbe", "XidInfo",
           "describe_xid", "empty_snapshot", "make_probe"]
