"""Collective faults: a rank misbehaves inside a collective.

``nccl-hang`` stands for a hung NCCL kernel or a dead link (on NVIDIA GPUs
often after an Xid or a NIC fault): the rank enters the gradient all-reduce and
never leaves it. Produced on gloo (and NCCL alike) by blocking the target
rank's DDP communication hook forever before it posts its collective. Its
peers block in the same all-reduce until a timeout; the runtime's watchdog
detects the stall after its bound (max(floor, k x median step time)), not the
backend's timeout.
"""

from __future__ import annotations

import threading
from typing import Any

from jitbench.faults.base import Fault


class HangCollective(Fault):
    """Block the target rank forever inside the first gradient collective of the step."""

    name = "nccl-hang"
    point = "collective"
    summary = "one rank blocks forever inside the gradient all-reduce of step k (hung kernel/link)"

    def fire(self, ctx: dict[str, Any]) -> None:
        threading.Event().wait()
