"""Numeric faults: a perturbation of the numbers training computes, which the job
survives and the fault-free reference run keeps.

``amp-backoff``
    What it stands for: an fp16 gradient overflow, the event mixed-precision
    loss scaling exists for (Micikevicius et al., "Mixed Precision Training",
    ICLR 2018, section 3.2: "if an overflow is detected, the weight update is
    skipped and the loss scale is decreased"). ``torch.amp.GradScaler`` does
    exactly that: ``step`` skips ``optimizer.step()`` when any gradient is
    inf or NaN and ``update`` multiplies the scale by ``backoff_factor`` (0.5)
    and resets its growth tracker to 0 (torch 2.14 ``torch/amp/grad_scaler.py``).
    How it is produced: in the target rank's DDP communication hook of step k,
    before that rank posts its gradient collective, the first element of the
    step's first gradient bucket is set to +inf (``ctx["grads"]``). The
    collective then sums an inf into that element on every rank (the ordered
    all-gather sums it in rank order, the plain all-reduce sums it), so every
    rank's GradScaler finds a non-finite gradient, skips the same optimizer step
    and halves the same scale: the replicas stay equal. What the ranks see:
    nothing fails; the step-end events record ``skipped: true``, the halved
    ``scale`` and ``growth_tracker`` 0; the learning-rate scheduler still steps.

    Unlike every other kind it is not an interruption but part of the training
    it perturbs (:attr:`~jitbench.faults.base.Fault.in_reference`): the
    fault-free reference run keeps it (:meth:`jitbench.harness.spec.RunSpec.without_faults`),
    so the oracle compares equal trajectories, and it acts at *every* execution
    of step k (a restart that replays step k overflows again, as the same data
    would); its ``fault`` event is written once per run, at the first.
    It needs ``--amp fp16`` (refused up front otherwise: bf16 and float32 train
    without a scaler, so nothing would back off) and a step trigger (no ``time_s``).
"""

from __future__ import annotations

from typing import Any

from jitbench.faults.base import Fault, FaultSpec


class ForceAmpBackoff(Fault):
    """Set one gradient element of the target rank to +inf at step k (before the collective)."""

    name = "amp-backoff"
    family = "numeric"
    point = "collective"
    movable = False
    fails_job = False
    in_reference = True
    summary = ("+inf in one gradient of one rank at step k: every rank's fp16 GradScaler "
               "skips the step and halves its scale (kept in the reference run)")

    @classmethod
    def check_run(cls, spec: FaultSpec, run: Any) -> str | None:
        wl = getattr(run, "workload", None)
        amp = (getattr(wl, "extra", None) or {}).get("amp", "off")
        if amp != "fp16":
            return (f"{cls.name} needs --amp fp16 (a GradScaler to back off); "
                    f"this run trains with amp {amp}")
        if spec.time_s is not None:
            return f"{cls.name} takes a step trigger (step k), not time_s"
        return None

    def fire(self, ctx: dict[str, Any]) -> None:
        grads = ctx.get("grads")
        if grads is None:
            raise RuntimeError(f"{self.name}: the collective point gave no gradient bucket")
        grads.view(-1)[0] = float("inf")
