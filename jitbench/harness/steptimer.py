"""The step clock of ``jitbench overhead`` on a launched script: the same in every arm.

The overhead of jitbench's hooks on a user's script is measured against the
script as ``torchrun`` runs it (no hooks, no runtime). That arm has no step
events to time, so every arm of the measurement (``none``: the script alone;
``own``: the hooks; ``jit``: the hooks and transparent JIT) carries the same
clock and nothing else of jitbench's in the ``none`` arm: one global optimizer
step post-hook (``torch.optim.optimizer.register_optimizer_step_post_hook``,
PyTorch docs, "torch.optim") that appends :func:`time.monotonic` and
:func:`time.process_time` to two lists when the first optimizer that steps
finishes a step. It costs one Python call and two clock reads per step (about a
microsecond), the same in every arm, so it cancels in the ratios.

Rank 0's lists are written at the process's end to
``RUN_DIR/steptimes/rank{R}-a{ATTEMPT}.json`` (:func:`timer_path`) as
``{"t_mono": [s, ...], "cpu_s": [s, ...]}``: entry ``i`` is the end of optimizer
step ``i + 1``. :func:`read_step_times` turns them into step-begin times the way
the overhead benchmark reads step events (the begin of step ``s + 1`` is the end
of step ``s``).

An optimizer step with every learning rate 0 before the first timed step is not
counted: it is DCP's state initialization (``_init_optim_state``), not training.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

__all__ = ["StepTimer", "main_timer", "read_step_times", "timer_path"]

TIMER_DIR = "steptimes"


def timer_path(run_dir: Path, rank: int, attempt: int) -> Path:
    """Where rank ``rank`` of attempt ``attempt`` writes its step times."""
    return Path(run_dir) / TIMER_DIR / f"rank{rank}-a{attempt}.json"


class StepTimer:
    """Wall and CPU time at the end of every optimizer step of the first optimizer
    that steps (module docstring).

    Args:
        path: the JSON file :meth:`write` writes (:func:`timer_path`).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.t_mono: list[float] = []
        """:func:`time.monotonic` at the end of each step (s)."""
        self.cpu_s: list[float] = []
        """:func:`time.process_time` (every thread of the process) at the same moments (s)."""
        self._opt: Any = None

    def install(self) -> Any:
        """Register the global optimizer step post-hook (before any other of jitbench's);
        returns its ``torch.utils.hooks.RemovableHandle``."""
        from torch.optim.optimizer import register_optimizer_step_post_hook

        return register_optimizer_step_post_hook(self._post)

    def _post(self, opt: Any, args: Any, kwargs: Any) -> None:
        if self._opt is None:
            lrs = [g.get("lr") for g in opt.param_groups]
            if lrs and all(lr is not None and float(lr) == 0.0 for lr in lrs):
                return  # DCP's state initialization, not a training step
            self._opt = opt
        elif opt is not self._opt:
            return
        self.t_mono.append(time.monotonic())
        self.cpu_s.append(time.process_time())

    def write(self) -> None:
        """Write the lists (module docstring); never raises (a measurement that lacks
        them fails later, with the file named)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps({"t_mono": self.t_mono, "cpu_s": self.cpu_s}))
        except OSError:
            pass


def read_step_times(run_dir: Path, rank: int = 0) -> tuple[dict[int, float], dict[int, float]]:
    """``(begin, cpu)``: step-begin times (s, monotonic) and process CPU times (s) of
    ``rank`` by step, the begin of step ``s + 1`` being the end of step ``s``.

    Raises:
        ValueError: the launch restarted (a file of a later attempt), or ``rank``
            wrote no step times (the script ended abnormally).
    """
    d = Path(run_dir) / TIMER_DIR
    later = sorted(d.glob(f"rank{rank}-a*.json"))
    if any(p.name != f"rank{rank}-a0.json" for p in later):
        raise ValueError(f"{run_dir}: the overhead launch restarted; its step times are not "
                         "steady")
    path = timer_path(run_dir, rank, 0)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: no step times ({exc})") from None
    begin = {i + 2: t for i, t in enumerate(data["t_mono"])}
    cpu = {i + 2: c for i, c in enumerate(data["cpu_s"])}
    return begin, cpu


def main_timer(run_dir: Path, rank: int, attempt: int) -> StepTimer | None:
    """The installed timer of a launch with ``step_timer`` set, for rank 0 only
    (the overhead benchmark reads rank 0; ranks move in lockstep), else None."""
    if rank != 0:
        return None
    timer = StepTimer(timer_path(run_dir, rank, attempt))
    timer.install()
    return timer

