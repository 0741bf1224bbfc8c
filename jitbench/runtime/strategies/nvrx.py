"""Peer ``nvrx:N``: NVIDIA Resiliency Extension's fault tolerance (``ft_launcher``).

What NVRx (``nvidia-resiliency-ext``, 0.4.1 here) provides, and what this
strategy uses of it:

- **Launcher and in-job restart**: ``ft_launcher`` is NVRx's fork of
  ``torchrun``; the harness starts it instead of torchrun
  (:mod:`jitbench.harness.launch`) with ``--max-restarts`` and its restart
  policy ``--ft-restart-policy any-failed`` (restart the worker group when any
  worker fails; ``min-healthy`` only matters with several nodes).
- **Hang detection by heartbeats**: each rank connects a
  ``nvidia_resiliency_ext.fault_tolerance.RankMonitorClient`` to the rank
  monitor that ``ft_launcher`` starts per rank, and sends one heartbeat per
  step (here at every step boundary). A rank whose next heartbeat does not
  arrive within ``rank_heartbeat_timeout`` (the first within
  ``initial_rank_heartbeat_timeout``) is sent ``rank_termination_signal`` by its
  monitor; the launcher then stops the group and restarts it. The harness sets
  that signal to SIGTERM (NVRx's default is SIGKILL) so that the rank's
  ``failure`` event (trigger ``sigterm``) records the moment NVRx detected it:
  ``detect_s`` is measured from events like every other strategy's. On gloo
  every rank of a hung collective misses its heartbeat, so every rank is
  signalled (observed: both monitors fire within 25 ms).
  jitbench's own hang watchdog is off under this strategy
  (:meth:`jitbench.harness.spec.RunSpec.runtime_config`): detection is NVRx's.
  The timeouts are set by the harness from the spec's hang settings
  (``hang_floor_s`` for the heartbeat timeout, ``max(hang_first_s, hang_floor_s)``
  for the first one); NVRx can also learn them from observed intervals
  (``calculate_and_set_hb_timeouts``), which this strategy does not use so that
  runs are comparable.
- **Checkpoints**: NVRx restarts the job; the state comes from the last
  checkpoint the job wrote. Users of NVRx checkpoint periodically; here rank 0
  writes the runtime's synchronous checkpoint every N steps
  (:class:`~jitbench.runtime.strategies.periodic.Periodic`; ``nvrx`` means
  ``nvrx:5``), so a failure replays the steps since the last one.

Not used, and why: NVRx's in-process restart (``nvidia_resiliency_ext.inprocess``)
frees a hung rank by aborting its NCCL communicator (``inprocess.abort``, CUDA);
a gloo collective cannot be aborted (docs/design.md, "Known traps"), so on CPU it
cannot recover a hang. Its local (node-memory) checkpointing
(``checkpointing.local``) and straggler detection use CUDA as well.
Section-based detection (``start_section``/``end_section``), the other mode of
the same monitor, is :class:`NvrxSections` (``nvrx-sections:N``): a timeout per
step section instead of one between heartbeats.

Outside ``ft_launcher`` (no rank monitor socket in the environment) the
strategy behaves as ``periodic:N`` and says so in a ``warning`` event.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jitbench.runtime.strategies.periodic import Periodic

if TYPE_CHECKING:
    from jitbench.runtime.core import RestoreResult, Runtime

__all__ = ["Nvrx", "NvrxSections"]

class Nvrx(Periodic):
    """Periodic checkpoints every N steps plus a heartbeat to NVRx's rank monitor at
    every step boundary (see the module docstring)."""

    name = "nvrx"

    def __init__(self, config) -> None:
        super().__init__(config)
        self._client = None

    def on_restore(self, rt: Runtime, restored: RestoreResult, manifest: dict | None) -> None:
        super().on_restore(rt, restored, manifest)
        if self._client is not None:
            return
        from nvidia_resiliency_ext.fault_tolerance import RankMonitorClient

        client = RankMonitorClient()
        try:
            client.init_workload_monitoring()
        except Exception as exc:  # noqa: BLE001 (not under ft_launcher)
            rt.events.emit("warning", where="nvrx",
                           message=f"no NVRx rank monitor ({type(exc).__name__}: {exc}); "
                                   "running as periodic checkpoints only"[:500])
            return
        self._client = client
        client.send_heartbeat()
        rt.events.emit("heartbeat", "point", step=restored.step,
                       timeout_s=getattr(client.hb_timeouts, "subsequent", None),
                       first_timeout_s=getattr(client.hb_timeouts, "initial", None))

    def at_boundary(self, rt: Runtime, step: int) -> None:
        super().at_boundary(rt, step)
        if self._client is not None:
            self._client.send_heartbeat()

    def finish(self, rt: Runtime) -> None:
        super().finish(rt)
        if self._client is not None:
            self._client.shutdown_workload_monitoring()
            self._client = None


class NvrxSections(Nvrx):
    """``nvrx-sections:N``: NVRx's section-based detection instead of heartbeats.

    Each step runs inside the section ``step`` (opened at the restore and at every
    step boundary, closed at the next boundary before the periodic checkpoint), so
    ``--ft-rank-section-timeouts step:<hang_floor_s>`` bounds one step and the
    out-of-section timeout (``max(hang_first_s, hang_floor_s)``) bounds the rest (start-up, the
    checkpoint writes). No heartbeats are sent (NVRx's heartbeat timeouts stay at
    their defaults, an hour).
    """

    name = "nvrx-sections"

    def on_restore(self, rt: Runtime, restored: RestoreResult, manifest: dict | None) -> None:
        Periodic.on_restore(self, rt, restored, manifest)
        if self._client is not None:
            return
        from nvidia_resiliency_ext.fault_tolerance import RankMonitorClient

        client = RankMonitorClient()
        try:
            client.init_workload_monitoring()
        except Exception as exc:  # noqa: BLE001 (not under ft_launcher)
            rt.events.emit("warning", where="nvrx",
                           message=f"no NVRx rank monitor ({type(exc).__name__}: {exc}); "
                                   "running as periodic checkpoints only"[:500])
            return
        self._client = client
        client.start_section("step")
        rt.events.emit("section", "point", step=restored.step, section="step",
                       timeout_s=client.section_timeouts.section.get("step"),
                       out_of_section_timeout_s=client.section_timeouts.out_of_section)

    def at_boundary(self, rt: Runtime, step: int) -> None:
        if self._client is not None:
            self._client.end_section("step")
        Periodic.at_boundary(self, rt, step)  # the checkpoint is out of the step section
        if self._client is not None:
            self._client.start_section("step")

    def finish(self, rt: Runtime) -> None:
        if self._client is not None:
            self._client.end_all_sections()
        super().finish(rt)
