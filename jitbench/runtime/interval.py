"""The checkpoint interval of ``periodic:auto``: the Young/Daly optimum.

For a job whose failures arrive as a Poisson process with mean time between
failures ``M`` (s, of the *whole job*, not of one GPU) and a checkpoint that
stalls the job for ``o`` s, the compute time between checkpoints that
minimises the expected wasted time is, to first order,

    tau = sqrt(2 * o * M)                                   (Young 1974)

(J. W. Young, "A first order approximation to the optimum checkpoint
interval", Communications of the ACM 17(9), 1974). Daly's higher-order
estimate ("A higher order estimate of the optimum checkpoint interval for
restart dumps", Future Generation Computer Systems 22(3), 2006, eq. 37) is

    tau = sqrt(2 o M) * (1 + sqrt(o / (2 M)) / 3 + (o / (2 M)) / 9) - o    for o < 2 M
    tau = M                                                                 otherwise

and agrees with Young's within a few per cent when ``o << M``. jitbench uses
Young's form (the one the benchmark literature quotes) and records Daly's
beside it. The interval in steps is ``N = max(1, round(tau / step_s))`` with
``step_s`` the measured median step time.

For a job of ``n`` GPUs whose GPUs fail independently with MTBF ``m`` each,
``M = m / n``.
"""

from __future__ import annotations

import math

__all__ = ["daly_interval_s", "steps_for_interval", "young_interval_s"]


def young_interval_s(cost_s: float, mtbf_s: float) -> float:
    """Young's optimum compute time between checkpoints, ``sqrt(2 o M)`` (s).

    Args:
        cost_s: the stall of one checkpoint, ``o`` (s, > 0).
        mtbf_s: the job's mean time between failures, ``M`` (s, > 0).

    Raises:
        ValueError: a non-positive or non-finite argument.
    """
    _check(cost_s, mtbf_s)
    return math.sqrt(2.0 * cost_s * mtbf_s)


def daly_interval_s(cost_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum compute time between checkpoints (s), Daly 2006 eq. 37."""
    _check(cost_s, mtbf_s)
    if cost_s >= 2.0 * mtbf_s:
        return mtbf_s
    r = cost_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * cost_s * mtbf_s) * (1.0 + math.sqrt(r) / 3.0 + r / 9.0) - cost_s


def steps_for_interval(interval_s: float, step_s: float) -> int:
    """Checkpoint every ``max(1, round(interval_s / step_s))`` steps.

    Raises:
        ValueError: a non-positive or non-finite step time.
    """
    if not (step_s > 0 and math.isfinite(step_s)):
        raise ValueError(f"step time must be a positive number of seconds, got {step_s!r}")
    return max(1, round(interval_s / step_s))


def _check(cost_s: float, mtbf_s: float) -> None:
    for name, v in (("checkpoint cost", cost_s), ("MTBF", mtbf_s)):
        if not (v > 0 and math.isfinite(v)):
            raise ValueError(f"{name} must be a positive number of seconds, got {v!r}")
