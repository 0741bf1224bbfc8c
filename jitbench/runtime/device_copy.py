"""Host copies of GPU state that do not queue behind a hung collective.

A JIT save happens while the main thread is blocked in a collective that will
never finish. On CUDA that collective is an NCCL kernel, and the stream the
training runs on waits for it: ``ProcessGroupNCCL`` makes the current stream
wait on the NCCL stream's end event when the work is waited for (DDP does so
at the end of the backward pass). ``torch.save`` of a CUDA tensor copies it to
the host on the *current* stream, so a save from the watchdog thread would
queue behind the hung kernel and never finish; the agent would SIGKILL the
rank after its grace period and the JIT checkpoint would be lost (docs/design.md,
"Mechanism": the copy to host must not queue behind the hung NCCL kernel).

What this module does instead (the healthy replica's state is read from the
GPU apart from the training stream, as in Gupta et al., EuroSys 2024):

- At every iteration boundary the main thread records one CUDA event per
  device on its current stream (:class:`BoundaryEvents`, a few microseconds):
  everything queued before it (the optimizer step, the boundary snapshot's
  buffer copies) is the state of that boundary.
- The save (:func:`host_copy`) waits for that event on the *host*, polling
  with a timeout (a GPU that never reaches the boundary gives one clear
  error, not a thread blocked in the driver), then copies each tensor on a
  side stream into pageable host memory. The side stream is created with the
  boundary events, at registration, never during a save: on an H200 (driver
  580, torch 2.11) creating a CUDA stream while a kernel ran on the training
  stream waited for that kernel to end, and so did allocating page-locked
  memory, while a pageable copy on a stream made beforehand returned in 3 ms
  (``tests/gpu/side_stream_probe.py``; ``benchmarks/gpu-2026-11-30.txt``). Nothing waits for work queued after the boundary (the next step's
  forward and backward pass and the hung all-reduce): that work only reads
  the parameters and optimizer state, which the runtime keeps from changing
  until the save has finished (the save holds the state).
- The host must not run ahead of the device across an optimizer step: with
  asynchronous execution it would queue step k's optimizer kernels behind
  the hung all-reduce and move its own counters (step, scheduler, the
  optimizer's CPU-resident ``step`` counts) to boundary k while the device
  tensors stay at k-1. Under ``jit`` the runtime therefore waits for the
  device (:meth:`BoundaryEvents.sync`) before each optimizer step, outside
  the window in which it holds the state, so a hang stops the main thread at
  boundary k-1 on both.

Not covered: a collective queued *between* the optimizer step and the end of
the step (say an all-reduce of the loss for logging after ``opt.step()``)
that hangs leaves that step's boundary event behind it; the save then waits
``timeout_s`` and fails with :class:`DeviceCopyError` (the job falls back to
the last periodic checkpoint). Log after the step's end, or before the
optimizer step.

Pageable rather than pinned host memory: page-locked allocation is one of the
operations after which CUDA may serialise commands of different streams
(CUDA C++ Programming Guide, "Implicit Synchronization"), and a save must not
risk waiting for the hung kernel. A pageable device-to-host copy returns when
the copy has finished on its stream (CUDA Runtime API, "API synchronization
behavior"), which is what a save needs anyway.

CPU tensors (gloo) pass through unchanged, so a CPU job pays nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import torch

__all__ = ["BoundaryEvents", "DeviceCopyError", "cuda_devices", "host_copy", "map_tensors"]


class DeviceCopyError(RuntimeError):
    """The GPU did not reach the boundary, or a copy failed; the message is one line."""


def map_tensors(obj: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """``obj`` with every tensor ``t`` inside dicts, lists and tuples replaced by ``fn(t)``.

    Other values are kept as they are (not copied); containers are rebuilt, so
    ``obj`` itself is never modified.
    """
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, dict):
        return {k: map_tensors(v, fn) for k, v in obj.items()}
    if isinstance(obj, list):
        return [map_tensors(v, fn) for v in obj]
    if isinstance(obj, tuple):
        return tuple(map_tensors(v, fn) for v in obj)
    return obj


def cuda_devices(tensors: Iterable[torch.Tensor]) -> list[torch.device]:
    """The distinct CUDA devices among ``tensors`` (empty for a CPU job), in first-seen order."""
    seen: dict[torch.device, None] = {}
    for t in tensors:
        if t.device.type == "cuda":
            seen.setdefault(t.device, None)
    return list(seen)


class BoundaryEvents:
    """One CUDA event per device, re-recorded at every iteration boundary.

    Args:
        devices: the CUDA devices the training state lives on (see
            :func:`cuda_devices`); empty: every method is a no-op.
    """

    def __init__(self, devices: Iterable[torch.device]) -> None:
        self.devices = list(devices)
        self.events = {d: torch.cuda.Event() for d in self.devices}
        self.streams = {d: torch.cuda.Stream(device=d) for d in self.devices}
        """One side stream per device for :func:`host_copy`, made now: creating a
        stream later may wait for a hung kernel (module docstring)."""
        self.recorded = False

    def mark(self) -> None:
        """Record each device's event on the calling thread's current stream of that
        device (call it from the training thread at a boundary)."""
        for d, ev in self.events.items():
            ev.record(torch.cuda.current_stream(d))
        self.recorded = bool(self.events)

    def sync(self) -> None:
        """Block the calling thread until each device's current stream has run all
        work queued so far (the GIL is released meanwhile, so the watchdog runs).
        Under ``jit`` the runtime calls it before each optimizer step (see
        ``Runtime._on_optimizer_step``): it costs the overlap of launching the
        optimizer step with the end of the gradient all-reduce, which
        ``jitbench overhead`` measures."""
        for d in self.devices:
            torch.cuda.current_stream(d).synchronize()

    def wait(self, timeout_s: float, poll_s: float = 0.001) -> None:
        """Wait on the host until every device has run all work up to the boundary.

        Raises:
            DeviceCopyError: a device did not get there within ``timeout_s`` (s).
        """
        if not self.recorded:
            return
        deadline = time.monotonic() + timeout_s
        for d, ev in self.events.items():
            while not ev.query():
                if time.monotonic() > deadline:
                    raise DeviceCopyError(
                        f"{d} did not finish the work of the last iteration boundary within "
                        f"{timeout_s:g} s")
                time.sleep(poll_s)


def host_copy(state: Any, boundary: BoundaryEvents | None, timeout_s: float = 60.0) -> Any:
    """A copy of ``state`` whose CUDA tensors are host tensors, made without the current stream.

    Args:
        state: a nested structure of dicts, lists, tuples and tensors (a
            checkpoint state); CPU tensors are passed through, not copied.
        boundary: the events of the boundary ``state`` belongs to, and the side
            streams made with them; None or unrecorded: no wait (the caller knows
            the state is complete; a side stream is made here).
        timeout_s: how long to wait for the boundary (s).

    Returns:
        The same structure with each CUDA tensor replaced by a CPU tensor of the
        same shape and dtype (pageable memory, see the module docstring).

    Raises:
        DeviceCopyError: the boundary was not reached in time, or a copy failed.
    """
    cuda = [t for t in _tensors(state) if t.device.type == "cuda"]
    if not cuda:
        return state
    if boundary is not None:
        boundary.wait(timeout_s)
    made = boundary.streams if boundary is not None else {}
    streams = {d: made.get(d) or torch.cuda.Stream(device=d) for d in cuda_devices(cuda)}

    def to_host(t: torch.Tensor) -> torch.Tensor:
        if t.device.type != "cuda":
            return t
        src = t.detach()
        dst = torch.empty(src.shape, dtype=src.dtype, device="cpu")
        with torch.cuda.device(src.device), torch.cuda.stream(streams[src.device]):
            dst.copy_(src)  # pageable destination: returns once the copy is done
        return dst

    try:
        return map_tensors(state, to_host)
    except RuntimeError as exc:
        raise DeviceCopyError(f"device-to-host copy failed: {' '.join(str(exc).split())[:300]}"
                              ) from exc


def _tensors(obj: Any) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []

    def keep(t: torch.Tensor) -> torch.Tensor:
        out.append(t)
        return t

    map_tensors(obj, keep)
    return out
