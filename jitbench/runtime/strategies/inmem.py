"""``inmem:N[:disk=M]``: in-memory checkpoints in a peer's host memory (Gemini-style).

The baseline of in-memory checkpointing systems: Gemini (Wang et al., "GEMINI:
Fast Failure Recovery in Distributed Training with In-Memory Checkpoints",
SOSP 2023) and REFT. Every N steps each rank copies its training state into
host memory, its own and a peer's, and a failure is recovered from a surviving
copy instead of from remote storage; persistent storage is only the last
resort.

Defaults and where they come from:

- **N** (required, ``inmem:N``): steps between in-memory copies. Gemini's design
  point is a copy at every iteration (``inmem:1``) where the network's idle
  time allows it; jitbench leaves N to the user, as ``periodic:N``.
- **Two copies** (the rank's own and one peer's): Gemini's group placement
  with m = 2 replicas per checkpoint, the setting of its evaluation. Rank r
  keeps its own copy and the copy of rank (r+1) % world; it sends its own to
  rank (r-1) % world.
- **disk=M** (default 10, jitbench's own choice): rank 0 also writes a disk
  checkpoint of every M-th copy (the steps that are multiples of N x M), in the
  background. Gemini writes to persistent storage "at a lower frequency" and
  fixes no number; 10 keeps the disk traffic a tenth of the memory traffic.

Per copy (at the step end of every step that is a multiple of N, main thread):

1. **Own copy** (a ``stage`` span, kind ``inmem``: the main thread's stall): the
   boundary state is copied into fresh host buffers
   (:func:`~jitbench.runtime.staging.stage_for_async_save`; on CUDA the
   device-to-host copy). When the previous copy's send or disk write is still
   running, the main thread waits for it before handing this copy over
   (``waited_s``, part of the span), so at most two copies are held and copies
   that cannot keep up with N show as stall.
2. **Peer copy** (``copy`` begin/end, kind ``inmem``; a background thread, off
   the training thread): the copy, serialised with :func:`torch.save`, is sent
   into the host memory of the holder: each rank runs a ``TCPStore`` server of
   its own (loopback, OS-chosen port, published in the membership store per
   generation), and the sender ``set``\\ s the copy there in pieces of at most
   :data:`PIECE_BYTES` (``copy/<rank>/<step>/<i>``, then their count
   ``copy/<rank>/<step>/n``), then ``latest/<rank>``. The copy lives in the
   holder's process and dies with it; a send cut off by a failure leaves the
   holder's previous copy intact.
3. **Disk** (rank 0, every M-th copy; ``save`` begin/end, kind ``disk``): the same
   thread writes the own copy with :meth:`Runtime.write_checkpoint` (temp file,
   fsync, manifest last) after the send, and prunes older checkpoints.

A copy is also taken after every restore and every in-process recovery (the
adopted state), so a rank always holds one: at a fresh start the copy of step 0.

Recovery uses the in-process protocol of ``jit-inprocess``
(:class:`~jitbench.runtime.strategies.jit_inprocess.InProcessRecovery`:
membership, spares, re-formed process group, one broadcast). What differs:

- Each member reports the step of its newest own copy (not its live boundary);
  the leader's source is a survivor holding the newest copy, step k.
- The source sends the failed rank's copy when it holds it at step k (the
  copy that rank sent into its memory), else its own copy of step k; every
  member adopts it (restore kind ``memory``, the source names which copy), so
  *every* member rolls back to step k and re-executes steps k+1 onwards: the
  run replays the steps since the last in-memory copy (at most N per failure)
  and stays bitwise equal to the fault-free run.
- Under data parallelism every rank's copy of step k is the same replicated
  state, so one surviving copy restores every rank. When none survives (every
  rank holding one is gone: with two ranks, both ranks lost; the orphaned
  generation is noticed by a waiting spare,
  :meth:`~jitbench.runtime.inprocess.membership.Membership.lead_if_lost`), the
  membership falls back, the job restarts as a whole and restores the newest
  committed disk checkpoint (restore kind ``disk``), replaying the steps since
  it; without one, from step 0.

A rank that fails by itself (an exception in its step, SIGTERM) leaves without
saving anything: its copies are in its peers' memory.

Limits: one node (the copies travel over loopback, like the membership store);
the copy is a full copy of the replicated state, sent whole (Gemini interleaves
the traffic of sharded copies with training's and pipelines it through GPU
buffers; on gloo there is no such traffic to hide behind).
"""

from __future__ import annotations

import io
import queue
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import torch

from jitbench.runtime import checkpoint as ckpt
from jitbench.runtime.staging import stage_for_async_save
from jitbench.runtime.strategies import REGISTRY
from jitbench.runtime.strategies.jit_inprocess import InProcessRecovery

if TYPE_CHECKING:
    from jitbench.runtime.config import RuntimeConfig
    from jitbench.runtime.core import RestoreResult, Runtime
    from jitbench.runtime.inprocess.group import InProcessGroup
    from jitbench.runtime.inprocess.membership import Decision

__all__ = ["InMemory", "KIND"]

KIND = "inmem"
"""``kind`` of the ``stage`` (own copy) and ``copy`` (peer copy) events."""
DISK_KIND = "disk"
"""Checkpoint kind of the disk checkpoints (part names ``disk_stepSSSSSSSS_rankRRRRR``)."""
PIECE_BYTES = 4 << 20
"""Largest value one ``set`` into a holder's memory carries (bytes). torch's libuv
``TCPStore`` server (the default since torch 2.4) refuses a payload over 8 MiB
(``Invalid payload size``; observed with torch 2.14.1) and closes the connection,
so a copy of a model of more than a few million parameters is sent in pieces."""
STORE_TIMEOUT_S = 30.0
"""Timeout of a send into a holder's memory and of the lookup of its address (s): a
holder that died refuses the connection at once; one that never published its address
(it died while joining) costs this long, in the background thread."""


class InMemory(InProcessRecovery):
    """In-memory checkpoints with in-process recovery (see the module docstring).

    The peer copies, the disk checkpoints and the recovery need the membership
    :meth:`bind` gives (the harness's ``replicas`` launcher); a runtime that was
    never bound keeps only its own copy and a failure ends the process.

    Raises:
        ValueError: an interval or ``disk`` below 1.
    """

    name = "inmem"
    restored_kind = "memory"

    def __init__(self, config: RuntimeConfig) -> None:
        super().__init__(config)
        self.disk_every = int(config.options.get("disk",
                                                 REGISTRY[self.name].default_options()["disk"]))
        """In-memory copies per disk checkpoint (M)."""
        self.own: dict | None = None
        """``{"state", "meta", "step"}`` of this rank's newest copy (host buffers that
        nothing else writes)."""
        self.server: Any = None
        """This rank's memory for its peer's copy: a ``TCPStore`` server."""
        self.courier: _Courier | None = None

    @classmethod
    def validate(cls, config: RuntimeConfig) -> None:
        if config.interval < 1:
            raise ValueError("inmem needs an interval >= 1 (inmem:N)")
        if int(config.options.get("disk", 1)) < 1:
            raise ValueError("inmem needs disk >= 1 (inmem:N:disk=M)")

    # ------------------------------------------------------------------ set-up
    def bind(self, rt: Runtime, group: InProcessGroup, rebuild: Callable[[], None],
             release: Callable[[], None] = lambda: None) -> None:
        """Use ``group`` (see :meth:`InProcessRecovery.bind`) and open this rank's memory
        for its peer's copy (a ``TCPStore`` server on the membership store's host).

        Raises:
            RuntimeError: the server cannot listen (torch's message).
        """
        import torch.distributed as dist

        super().bind(rt, group, rebuild, release)
        host = group.address.rpartition(":")[0]
        self.server = dist.TCPStore(host, 0, is_master=True, wait_for_workers=False,
                                    timeout=timedelta(seconds=STORE_TIMEOUT_S))
        self.courier = _Courier(rt, group, f"{host}:{self.server.port}")

    def holds_state(self, rt: Runtime) -> bool:
        return self.own is not None

    def held_step(self, rt: Runtime) -> int:
        return self.own["step"] if self.own is not None else 0

    # -------------------------------------------------------------- the copies
    def on_restore(self, rt: Runtime, restored: RestoreResult, manifest: dict | None) -> None:
        """A fresh start or a disk restore: this generation's first copy (no disk write)."""
        self._copy(rt, rt.completed, disk=False, stage_event=False)

    def at_boundary(self, rt: Runtime, step: int) -> None:
        """Every N steps: the own copy, then its peer copy (and every M-th its disk
        checkpoint on rank 0) in the background."""
        n = self.config.interval
        if n > 0 and step % n == 0:
            disk = rt.rank == 0 and step % (n * self.disk_every) == 0
            self._copy(rt, step, disk=disk, stage_event=True)

    def after_transfer(self, rt: Runtime, dec: Decision) -> None:
        """Every member, after adopting the source's copy: the new generation's first copy."""
        self._copy(rt, rt.completed, disk=False, stage_event=False)

    def _copy(self, rt: Runtime, step: int, disk: bool, stage_event: bool) -> None:
        """Copy the boundary after ``step`` into fresh host buffers (main thread) and hand
        it to the courier. ``stage_event``: record the main thread's time as a ``stage``
        span (a steady-state copy; the copies at a restore or recovery are part of it)."""
        t0 = time.monotonic()
        if stage_event:
            rt.events.emit("stage", "begin", kind=KIND, step=step)
        state = stage_for_async_save(rt.boundary_state())
        waited_s = self.courier.wait() if self.courier is not None else 0.0
        self.own = {"state": state, "meta": rt.manifest_meta(), "step": step}
        if stage_event:
            rt.events.emit("stage", "end", kind=KIND, step=step, dur_s=time.monotonic() - t0,
                           waited_s=waited_s)
        if self.courier is not None:
            self.courier.send(self.own, disk)

    # ---------------------------------------------------------------- recovery
    def source_state(self, rt: Runtime, dec: Decision) -> dict:
        """The failed rank's copy from this rank's memory when it is of the step this rank
        reported, else a copy of this rank's own (the own copy stays as it is)."""
        own = self.own
        held = (rt.rank + 1) % rt.world_size
        if held != rt.rank and held in set(dec.dead) | set(dec.hung):
            peer = self._held_copy(held, own["step"])
            if peer is not None:
                return {**peer, "manifest": {"meta": peer["meta"]},
                        "source": f"rank {rt.rank} memory (copy of rank {held})"}
        return {"state": stage_for_async_save(own["state"]), "manifest": {"meta": own["meta"]},
                "step": own["step"], "source": f"rank {rt.rank} memory (own copy)"}

    def _held_copy(self, rank: int, step: int) -> dict | None:
        """``rank``'s copy of ``step`` from this rank's memory, or None (none, or older)."""
        latest = f"latest/{rank}"
        try:
            if not self.server.check([latest]) or int(self.server.get(latest)) != step:
                return None
            n = int(self.server.get(f"copy/{rank}/{step}/n"))
            data = b"".join(self.server.get(f"copy/{rank}/{step}/{i}") for i in range(n))
            return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        except Exception:  # noqa: BLE001 - an unreadable copy is no copy: send the own one
            return None

    def leave(self, rt: Runtime) -> None:
        if self.courier is not None:
            self.courier.wait()

    def finish(self, rt: Runtime) -> None:
        if self.courier is not None:
            self.courier.wait(self.config.sync_bound_s)

    def on_exit(self, rt: Runtime) -> None:
        if self.courier is not None:  # no disk commit without its event from here on
            self.courier.freeze()


class _Courier:
    """The background thread that sends each copy into the holder's memory and writes
    the disk checkpoints (one job at a time, in order).

    Args:
        rt: the runtime (events, rank, checkpoint writes).
        group: the membership (a store client of its own; the generation).
        address: ``host:port`` of this rank's memory, published per generation.
    """

    def __init__(self, rt: Runtime, group: InProcessGroup, address: str) -> None:
        self.rt, self.group, self.address = rt, group, address
        self.jobs: queue.Queue = queue.Queue()
        self.pending = 0  # jobs queued and not finished
        self.done = threading.Condition()
        self.commit = threading.Lock()
        self.frozen = False
        self.published: set[int] = set()
        self.store: Any = None  # this thread's membership client
        self.holder: tuple[str, Any] | None = None  # (address, client) of the holder
        # holder address -> (step, pieces) of the copy kept there
        self.sent: dict[str, tuple[int, int]] = {}
        self.thread = threading.Thread(target=self._run, name="inmem-courier", daemon=True)
        self.thread.start()

    def send(self, copy: dict, disk: bool) -> None:
        """Queue ``copy`` for the holder of this rank's generation (and the disk)."""
        with self.done:
            self.pending += 1
        self.jobs.put((self.group.gen, self.rt.rank, copy, disk))

    def wait(self, timeout_s: float | None = None) -> float:
        """Block until every queued job is done (at most ``timeout_s``, s; None: no
        limit); returns the wait (s)."""
        t0 = time.monotonic()
        with self.done:
            self.done.wait_for(lambda: self.pending == 0, timeout_s)
        return time.monotonic() - t0

    def freeze(self, timeout_s: float = 10.0) -> None:
        """Commit no disk checkpoint from now on (one being committed finishes first,
        with its event). The lock stays held."""
        if self.commit.acquire(timeout=timeout_s):
            self.frozen = True

    def _run(self) -> None:
        while True:
            job = self.jobs.get()
            try:
                self._do(*job)
            except Exception as exc:  # noqa: BLE001 - never let the thread die
                self.rt.events.emit("error", where="inmem courier", error=repr(exc)[:300])
            finally:
                with self.done:
                    self.pending -= 1
                    self.done.notify_all()

    def _do(self, gen: int, rank: int, copy: dict, disk: bool) -> None:
        world = self.rt.world_size
        if self.store is None:
            self.store = self.group.client()
        if gen not in self.published:  # where this rank's memory is, for its peer
            self.store.set(f"inmem/g{gen}/mem/{rank}", self.address)
            self.published.add(gen)
        if world > 1:
            self._send(gen, rank, (rank - 1) % world, copy)
        if disk:
            self._write(copy)

    def _send(self, gen: int, rank: int, holder: int, copy: dict) -> None:
        import torch.distributed as dist

        ev = self.rt.events
        step = copy["step"]
        ev.emit("copy", "begin", kind=KIND, step=step, to=holder)
        t0 = time.monotonic()
        try:
            key = f"inmem/g{gen}/mem/{holder}"
            self.store.wait([key], timedelta(seconds=STORE_TIMEOUT_S))
            address = self.store.get(key).decode()
            if self.holder is None or self.holder[0] != address:
                host, _, port = address.rpartition(":")
                self.holder = None  # the previous holder's connection closes
                self.holder = (address, dist.TCPStore(
                    host, int(port), is_master=False, wait_for_workers=False,
                    timeout=timedelta(seconds=STORE_TIMEOUT_S)))
            buf = io.BytesIO()
            torch.save({"state": copy["state"], "meta": copy["meta"], "step": step}, buf)
            data = buf.getvalue()
            client = self.holder[1]
            pieces = range(0, max(len(data), 1), PIECE_BYTES)
            for i, at in enumerate(pieces):
                client.set(f"copy/{rank}/{step}/{i}", data[at:at + PIECE_BYTES])
            client.set(f"copy/{rank}/{step}/n", str(len(pieces)))  # complete from here
            client.set(f"latest/{rank}", str(step))
            # a set is not acknowledged: torch's store client returns once the bytes are
            # sent, and a large piece may still be in flight (a check from another
            # connection right after missed it). A read on this connection is answered
            # after every set before it: the copy is in the holder's memory from here.
            if client.get(f"latest/{rank}") != str(step).encode():
                raise RuntimeError(f"the holder's latest copy is not step {step}")
            old = self.sent.get(address)
            if old is not None and old[0] != step:
                for key in [f"copy/{rank}/{old[0]}/{i}" for i in range(old[1])] + [
                        f"copy/{rank}/{old[0]}/n"]:
                    client.delete_key(key)
            self.sent[address] = (step, len(pieces))
        except Exception as exc:  # noqa: BLE001 - the holder died: the copy is not kept there
            self.holder = None
            ev.emit("copy", "end", kind=KIND, step=step, to=holder, ok=False,
                    error=f"{type(exc).__name__}: {exc}"[:300], dur_s=time.monotonic() - t0)
            return
        ev.emit("copy", "end", kind=KIND, step=step, to=holder, ok=True, bytes=len(data),
                dur_s=time.monotonic() - t0)

    def _write(self, copy: dict) -> None:
        rt = self.rt
        with self.commit:  # the commit and its event, or neither (see freeze)
            if self.frozen:
                return
            try:
                rt.write_checkpoint(DISK_KIND, copy["step"], {"step": copy["step"]},
                                    state=copy["state"])
                ckpt.prune(rt.config.ckpt_dir, rt.config.keep_steps)
            except ckpt.CheckpointWriteError:
                pass  # its save end event (ok false) is written; the last one stays
