"""Run specs: everything that determines a run, validated up front.

A :class:`RunSpec` is written to ``<run_dir>/spec.json`` before launch and
read back by every worker, so a run is reproducible from its spec.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from jitbench import hang
from jitbench.errors import ScheduleError, SpecError, unknown
from jitbench.faults import FaultSpec
from jitbench.faults.matrix import unsupported
from jitbench.faults.schedule import check_plan
from jitbench.runtime import strategies
from jitbench.runtime.config import RuntimeConfig
from jitbench.workloads import WORKLOADS, WorkloadConfig

SPEC_VERSION = 1
BACKENDS = ("gloo", "nccl")
NO_HANG_BOUND_S = 1e9
"""The runtime's hang bound where another system detects hangs (s: never)."""


def check_nccl(nproc: int) -> None:
    """Refuse ``--backend nccl`` where it cannot run: NCCL needs one CUDA device
    per rank of a node (two ranks on one GPU are refused by NCCL itself).

    Raises:
        SpecError: no CUDA, no NCCL in this torch build, or fewer devices than
            ``nproc`` on this node (one line).
    """
    import torch
    import torch.distributed as dist

    if not torch.cuda.is_available():
        raise SpecError("--backend nccl needs CUDA devices; this machine has none "
                        "(torch.cuda.is_available() is False); use --backend gloo")
    if not dist.is_nccl_available():
        raise SpecError("--backend nccl: this torch build has no NCCL")
    n = torch.cuda.device_count()
    if n < nproc:
        raise SpecError(f"--backend nccl runs one rank per CUDA device: --nproc {nproc} needs "
                        f"{nproc} devices on this node, it has {n}")


def nnodes_range(min_nodes: int | None, nnodes: int) -> str:
    """torchrun's ``--nnodes`` of a spec: ``"N"`` (``min_nodes`` None or equal), else
    ``"MIN:MAX"``."""
    lo = nnodes if min_nodes is None else min_nodes
    return str(nnodes) if lo == nnodes else f"{lo}:{nnodes}"


class Strategy(strategies.Choice):
    """A checkpointing strategy parsed from its CLI form: the registry's
    :class:`~jitbench.runtime.strategies.Choice` (``name``, ``interval``, ``auto``)."""

    @classmethod
    def parse(cls, text: str) -> Strategy:
        """Parse ``jit``, ``none``, ``periodic:N``, ``periodic-async:N``, ``periodic:auto``,
        ``inmem:N:disk=M`` (every form of :func:`jitbench.runtime.strategies.usage`).

        Raises:
            SpecError: anything else.
        """
        c = strategies.parse(text)
        return cls(c.name, c.interval, c.auto, c.options)


@dataclass
class RunSpec:
    """One run: workload, strategy, fault plan, world size and detection settings."""

    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    strategy: str = "jit"
    """A registered strategy (:mod:`jitbench.runtime.strategies`): ``jit``, ``none``,
    ``periodic:N``, ``periodic-async:N``, ``periodic:auto``, ``inmem:N[:disk=M]``, ..."""
    faults: list[FaultSpec] = field(default_factory=list)
    nproc: int = 2
    """Ranks per node."""
    nnodes: int = 1
    """Nodes the job trains on (``--nnodes N``, or MAX of ``--nnodes MIN:MAX``); each runs
    ``jitbench run`` with the same spec and ``rdzv_endpoint``. The world size is
    ``nproc * nnodes``: checkpoints, data shards and the bitwise oracle depend on it."""
    min_nodes: int | None = None
    """MIN of ``--nnodes MIN:MAX`` (None: ``nnodes``), passed to torch elastic as its node
    range. A round torch forms with fewer than ``nnodes`` nodes is refused by the workers
    (the world size is fixed); an agent started when ``nnodes`` nodes already hold places
    is refused before it joins (:mod:`jitbench.harness.rendezvous`)."""
    rdzv_endpoint: str | None = None
    """``host:port`` of the c10d rendezvous for several nodes (None: standalone, a port
    the OS picks)."""
    rdzv_id: str = "jitbench"
    """Rendezvous id shared by the nodes of one job."""
    rdzv_timeout_s: float | None = None
    """How long an agent waits for the other nodes in a rendezvous round, the first and
    every re-rendezvous after a failure (torch's c10d ``join_timeout``; None: torch's
    600 s). A node that never comes back (a partition for good) ends the job after it."""
    backend: str = "gloo"
    """``gloo`` (CPU) or ``nccl`` (one GPU per rank)."""
    max_restarts: int = 3
    """Elastic agent's restart budget (restarts of the whole worker group; under
    ``jit-inprocess`` each replica's agent has its own)."""
    spares: int | None = None
    """Hot spares waiting to replace a failed rank (``jit-inprocess``: default 1;
    other strategies: none). 0: the failed rank's own agent restarts it."""
    deterministic_reduce: bool = True
    """Average gradients with the rank-ordered all-gather hook (bitwise across restarts;
    DDP only: under ``hsdp`` FSDP2 reduces with its own collectives)."""
    parallel: str = "ddp"
    """How the model is spread over the ranks: ``ddp`` (full replicas) or ``hsdp:RxS``
    (FSDP2 hybrid sharding, R replica groups x S shards; :mod:`jitbench.harness.parallel`)."""
    hang_floor_s: float = hang.FLOOR_S
    """Hang bound floor (s; :class:`jitbench.hang.HangSettings`)."""
    hang_factor: float = hang.FACTOR
    """Hang bound = max(floor, factor x median step time)."""
    hang_first_s: float = hang.FIRST_S
    """Hang bound before any step time is known (s)."""
    pg_timeout_s: float = 300.0
    """Process-group timeout (s); generous: it also bounds connection set-up."""
    threads_per_rank: int = 1
    """torch intra-op threads per rank."""
    save_final_state: bool = True
    """Rank 0 writes the final state (for ``state_equal``)."""
    ckpt_dir: str | None = None
    """Checkpoint directory; None: ``RUN_DIR/ckpt``. An existing one must hold
    checkpoints of this same training (see :meth:`fingerprint`); the run resumes
    from its newest valid checkpoint where the strategy restores from one (its
    registry entry's ``restores``). Refused for a strategy that neither restores
    nor writes checkpoints (``none``, ``torchft``)."""
    mtbf_s: float | None = None
    """The job's mean time between failures (s, whole job) for ``periodic:auto``."""
    final_checkpoint: bool = False
    """Write a checkpoint of the final state at the end (kind ``final``) for a later job
    to resume from; refused for strategies that never read checkpoints."""
    segments: list = field(default_factory=list)
    """Steady-state overhead runs only: ``[[first_step, strategy, repeat], ...]``; the
    worker switches the runtime's strategy at each first step
    (:mod:`jitbench.harness.overhead`). Empty: one strategy for the whole run."""
    step_cpu_time: bool = False
    """Record the process CPU time (:func:`time.process_time`) in every step-begin event
    although the run has no :attr:`segments`: a launch-mode overhead measurement
    (:func:`jitbench.harness.overhead.launch_spec`), whose CPU-time overhead needs it.
    Overhead runs with segments always record it; other runs never (a system call per
    step on the training thread)."""
    version: int = SPEC_VERSION

    @property
    def steps(self) -> int:
        return self.workload.steps

    @property
    def hot_spares(self) -> int:
        """Spares the launcher starts (``spares``, or 1 under a replicas launcher)."""
        from jitbench.runtime.strategies import parse

        if parse(self.strategy).entry.launcher != "replicas":
            return 0
        return 1 if self.spares is None else self.spares

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes

    @property
    def nnodes_range(self) -> str:
        """``--nnodes`` as torchrun takes it: ``N``, or ``MIN:MAX``."""
        return nnodes_range(self.min_nodes, self.nnodes)

    def fingerprint(self) -> str:
        """Identity of the training this spec performs (16 hex digits of a SHA-256).

        Covers what determines the trained state: the workload config (model,
        data, batch, accumulation, steps, seed, options), world size, backend
        and the reduction. Not the strategy, faults or detection settings:
        every checkpoint of a training with the same fingerprint fits it.
        """
        return hashlib.sha256(json.dumps(self.identity(), sort_keys=True).encode()).hexdigest()[:16]

    def identity(self) -> dict:
        """The settings :meth:`fingerprint` hashes (JSON-able): ``workload`` (its
        config as a dict), ``world_size``, ``backend``, ``deterministic_reduce`` and,
        unless ``ddp``, ``parallel``."""
        ident = {"workload": asdict(self.workload), "world_size": self.world_size,
                 "backend": self.backend, "deterministic_reduce": self.deterministic_reduce}
        if self.parallel != "ddp":  # ddp runs keep the fingerprint they always had
            ident["parallel"] = self.parallel
        return ident

    def runtime_config(self, ckpt_dir: str) -> RuntimeConfig:
        """The runtime settings of this spec."""
        st = Strategy.parse(self.strategy)
        # under ft_launcher hangs are NVRx's to detect (heartbeats), not the runtime's
        off = st.entry.launcher == "ft_launcher"
        return RuntimeConfig(strategy=st.name, interval=st.interval, ckpt_dir=ckpt_dir,
                             options=st.all_options(),
                             hang_floor_s=NO_HANG_BOUND_S if off else self.hang_floor_s,
                             hang_factor=self.hang_factor,
                             hang_first_s=NO_HANG_BOUND_S if off else self.hang_first_s, run_id=self.fingerprint(),
                             mtbf_s=self.mtbf_s if st.auto else None,
                             final_checkpoint=self.final_checkpoint,
                             step_cpu_time=bool(self.segments) or self.step_cpu_time)

    def validate(self) -> None:
        """Check every field.

        Raises:
            SpecError: the first problem found, as one line.
        """
        if self.workload.name not in WORKLOADS:
            raise SpecError(unknown("workload", self.workload.name, WORKLOADS))
        st = Strategy.parse(self.strategy)
        strategies.check_available(st.name)
        for f in self.faults:  # the matrix's table (jitbench.faults.matrix), named first
            why = unsupported(f.kind, self.strategy)
            if why:
                raise SpecError(f"fault {f.kind} cannot be expressed under strategy {st.name}: "
                                f"{why}")
        if st.entry.launcher == "torchft":
            if self.backend != "gloo":
                raise SpecError("strategy torchft runs torchft's ProcessGroupGloo on CPU here; "
                                "its NCCL process groups are not wired (use --backend gloo)")
            if self.workload.extra.get("amp") == "fp16":
                raise SpecError("strategy torchft: torchft's OptimizerWrapper steps the "
                                "optimizer itself, so the fp16 GradScaler is not wired "
                                "(use --amp bf16 or none)")
            if self.segments:
                raise SpecError("strategy torchft cannot switch strategies inside one launch")
            if not self.deterministic_reduce:
                raise SpecError("--no-deterministic-reduce: strategy torchft averages "
                                "gradients with its own collectives, not DDP's, so the "
                                "option does nothing there (drop it)")
        if st.entry.launcher != "agent" and self.nnodes > 1:
            raise SpecError(f"strategy {st.name} runs on one node here (its launcher binds "
                            "the loopback address)")
        if self.ckpt_dir is not None and not st.entry.restores and not st.writers:
            # an option that would be ignored: the job never reads the directory (it
            # starts afresh or heals from a peer) and writes nothing there
            raise SpecError(f"--ckpt-dir {self.ckpt_dir}: strategy {st.name} neither "
                            "restores from a checkpoint directory nor writes to one, so the "
                            "option would be ignored; drop --ckpt-dir (or resume with a "
                            "strategy that checkpoints: jit, periodic:N)")
        if self.final_checkpoint and st.entry.writes == "never":
            raise SpecError(f"--final-checkpoint: strategy {st.name} never reads checkpoints, "
                            "so no later job could resume from one")
        if st.auto and not (self.mtbf_s is not None and self.mtbf_s > 0):
            raise SpecError("periodic:auto needs the job's MTBF: pass --mtbf (seconds, > 0)")
        if self.mtbf_s is not None and not self.mtbf_s > 0:
            raise SpecError(f"--mtbf must be > 0 seconds, got {self.mtbf_s}")
        if self.backend not in BACKENDS:
            raise SpecError(unknown("backend", self.backend, BACKENDS))
        if self.backend == "nccl":
            check_nccl(self.nproc)
        if self.nproc < 1:
            raise SpecError(f"--nproc must be >= 1, got {self.nproc}")
        if self.nnodes < 1:
            raise SpecError(f"--nnodes must be >= 1, got {self.nnodes}")
        if self.min_nodes is not None and not 1 <= self.min_nodes <= self.nnodes:
            raise SpecError(f"--nnodes MIN:MAX needs 1 <= MIN <= MAX, got "
                            f"{self.min_nodes}:{self.nnodes}")
        if self.spares is not None:
            if st.entry.launcher != "replicas" and self.spares:
                raise SpecError(f"--spares applies to strategies that replace a failed rank "
                                f"in process (jit-inprocess, inmem), not {self.strategy}")
            if self.spares < 0:
                raise SpecError(f"--spares must be >= 0, got {self.spares}")
        if st.entry.launcher == "replicas" and self.nnodes > 1:
            raise SpecError(f"{self.strategy} runs on one node for now (its membership store "
                            "binds the loopback address); use jit for several nodes")
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise SpecError("several nodes need --rdzv-endpoint HOST:PORT")
        if self.rdzv_timeout_s is not None and not self.rdzv_timeout_s > 0:
            raise SpecError(f"--rdzv-timeout-s must be > 0, got {self.rdzv_timeout_s}")
        if self.rdzv_endpoint and not re.fullmatch(r"[\w.\-\[\]:]+:\d+", self.rdzv_endpoint):
            raise SpecError(f"--rdzv-endpoint must be HOST:PORT, got {self.rdzv_endpoint!r}")
        if self.workload.steps < 1:
            raise SpecError(f"--steps must be >= 1, got {self.workload.steps}")
        if not 0 <= self.workload.seed < 2**32:  # numpy's seed range
            raise SpecError(f"--seed must be in [0, 2**32), got {self.workload.seed}")
        if self.workload.batch_size < 1 or self.workload.grad_accum < 1:
            raise SpecError("batch size and gradient accumulation must be >= 1")
        for name in ("hang_floor_s", "hang_factor", "hang_first_s", "pg_timeout_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise SpecError(f"--{name.replace('_', '-')} must be a finite number > 0, "
                                f"got {value}")
        if self.max_restarts < 0:
            raise SpecError(f"--max-restarts must be >= 0, got {self.max_restarts}")
        self._check_parallel(st)
        try:
            check_plan(self.faults, self.world_size, self.workload.steps,
                       self.workload.grad_accum, run=self)
        except ScheduleError as exc:  # one error type for the spec's callers
            raise SpecError(str(exc)) from None
        if self.workload.name == "gpt":
            from jitbench.workloads.gpt import check_extra

            try:
                check_extra(self.workload.extra)
            except ValueError as exc:
                raise SpecError(str(exc)) from exc

    def _check_parallel(self, st: Strategy) -> None:
        """Refuse what ``--parallel hsdp:RxS`` does not run with (one line each): a
        world other than R x S, a workload other than gpt, a strategy outside
        :data:`~jitbench.harness.parallel.HSDP_STRATEGIES` (``jit:split``,
        ``periodic:auto`` included), fp16 (its GradScaler is not shard-aware), the
        faults that act through DDP's comm hook, and ``deterministic_reduce`` False
        (a DDP comm-hook choice FSDP2 never reads)."""
        from jitbench.harness.parallel import HSDP_FAULTS_REFUSED, HSDP_STRATEGIES, parse

        par = parse(self.parallel)
        par.check(self.world_size, self.workload.name)
        if not par.sharded:
            return
        if not self.deterministic_reduce:
            raise SpecError(f"--no-deterministic-reduce: under --parallel {par} FSDP2 reduces "
                            "gradients with its own collectives, not DDP's comm hook, so the "
                            "option does nothing there (drop it; it applies to ddp)")
        if st.name not in HSDP_STRATEGIES or st.auto or st.all_options().get("split"):
            raise SpecError(f"--parallel {par}: strategy {self.strategy} is not wired for "
                            f"sharded training; use jit (jit:backstop=N), periodic:N or none")
        if self.workload.extra.get("amp") == "fp16":
            raise SpecError(f"--parallel {par}: fp16's GradScaler is not shard-aware here "
                            "(use --amp bf16 or off)")
        for f in self.faults:
            if f.kind in HSDP_FAULTS_REFUSED:
                raise SpecError(f"fault {f.kind} cannot be expressed under --parallel {par}: "
                                f"{HSDP_FAULTS_REFUSED[f.kind]}")

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict) -> RunSpec:
        d = dict(d)
        d["workload"] = WorkloadConfig(**d.get("workload", {}))
        d["faults"] = [FaultSpec(**f) for f in d.get("faults", [])]
        return cls(**d)

    @classmethod
    def load(cls, path: str | Path) -> RunSpec:
        return cls.from_dict(json.loads(Path(path).read_text()))

    def training_key(self) -> str:
        """The spec without faults (but its :meth:`reference_faults`) and checkpointing
        settings, as JSON: two specs with the same key train bitwise identically when
        fault-free (checkpointing only reads the state), so they can share one
        reference run."""
        d = asdict(self)
        # torchft trains with its own reduction and optimizer wrapper: its fault-free run
        # is its own reference, not another strategy's
        own = Strategy.parse(self.strategy).entry.launcher == "torchft"
        d["trainer"] = "torchft" if own else None
        # perturbations the reference keeps (amp-backoff) are part of the training
        d["faults"] = [asdict(f) for f in self.reference_faults()]
        if not d["faults"]:
            del d["faults"]  # the key of a spec without perturbations, as before
        if d.get("parallel") == "ddp":
            del d["parallel"]  # likewise for the default layout
        for k in ("strategy", "mtbf_s", "max_restarts", "segments", "rdzv_endpoint",
                  "rdzv_id", "rdzv_timeout_s", "ckpt_dir", "spares", "min_nodes"):
            d.pop(k, None)
        return json.dumps(d, sort_keys=True)

    def reference_faults(self) -> list[FaultSpec]:
        """The planned faults the fault-free reference keeps: perturbations of the
        training itself (:attr:`jitbench.faults.base.Fault.in_reference`, ``amp-backoff``)."""
        from jitbench.faults import FAULTS

        return [f for f in self.faults if f.kind in FAULTS and FAULTS[f.kind].in_reference]

    def without_faults(self) -> RunSpec:
        """The same spec, fault-free (the reference run; no hot spares: nothing fails).
        It keeps :meth:`reference_faults`, which are part of the training."""
        d = asdict(self)
        d["faults"] = [asdict(f) for f in self.reference_faults()]
        d["ckpt_dir"] = None
        if self.hot_spares:
            d["spares"] = 0
        return RunSpec.from_dict(d)
