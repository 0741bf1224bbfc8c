"""Process faults: the worker process dies.

``kill`` stands for the most common interruption in large jobs: a GPU or host
fault that takes the worker process down at once (Llama 3 report, Table 5:
faulty GPUs and HBM3 memory are ~47% of unexpected interruptions). It is
produced with SIGKILL, which the process cannot handle. Its peers see the
gradient collective of that step fail ("Connection closed by peer" on gloo) or
hang, and the elastic agent sees the worker exit with -9 and SIGTERMs the rest.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from jitbench.faults.base import Fault


class KillProcess(Fault):
    """SIGKILL the target rank inside the first gradient collective of the step."""

    name = "kill"
    point = "collective"
    summary = "SIGKILL one rank inside the gradient all-reduce of step k (GPU/host crash)"

    def fire(self, ctx: dict[str, Any]) -> None:
        ctx["events"].close()
        os.kill(os.getpid(), signal.SIGKILL)
