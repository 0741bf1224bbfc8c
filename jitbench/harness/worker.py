"""The per-rank training process that the elastic agent starts.

``python -m jitbench.harness.worker RUN_DIR`` reads ``RUN_DIR/spec.json`` and
trains the spec's workload under the JIT runtime (user-level API), with the
fault injector attached. Rank, world size and the attempt (restart count) come
from the agent's environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``/``MASTER_PORT``, ``TORCHELASTIC_RESTART_COUNT``).

The process group is built on the agent's TCPStore wrapped in a
``PrefixStore`` keyed by the attempt, so a restarted attempt never reads a
peer address left by the previous one (docs/design.md, "Known traps").

Per step the worker records in the step's end event: ``loss``, ``lr``,
``sample_ids`` (this rank's dataset indices in order), ``micro`` (the global
micro-batch indices ``(step - 1) * grad_accum + m`` accumulated into this
optimizer step), ``rng`` (:func:`~jitbench.runtime.rng.rng_digest` at the
start of the step, after any deferred RNG restore) and, with fp16, ``scale``
(the GradScaler's loss scale after its update), ``growth_tracker`` (its count
of consecutive finite steps, int) and ``skipped`` (the scaler skipped the
optimizer step: a non-finite gradient made ``update`` back the scale off; the
scheduler steps anyway). The collective point's context carries ``grads``,
the step's first gradient bucket (numerics faults write into it). Under ``--parallel
hsdp:RxS`` (:mod:`jitbench.harness.parallel`) the model is FSDP2-sharded instead of
DDP-wrapped; its collectives run inside the backward, so the ``collective`` point is
right before the window's last backward. Injection points: ``step`` (start of a step),
``micro:<m>`` (before micro-batch ``m`` of the accumulation window),
``collective`` (the first gradient collective of a step) and ``optimizer``
(after the gradients are reduced, before the optimizer step).

Exit statuses besides the runtime's 75/76: :data:`EXIT_BAD_CHECKPOINT` (77,
the checkpoint directory is another job's or a part does not fit) and
:data:`EXIT_BAD_INPUT` (78, the data or a workload option is unusable, or torch
elastic formed a world of another size than the spec's); the
reason is in an ``error`` event.
"""

from __future__ import annotations

import contextlib
import os
import random
import sys
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from jitbench.faults.attach import attach
from jitbench.harness.launch import die_with_parent
from jitbench.harness.parallel import parse as parse_parallel
from jitbench.harness.parallel import shard_model
from jitbench.harness.replicas import ENV_MEMBERS
from jitbench.harness.segments import apply_segment
from jitbench.harness.spec import RunSpec
from jitbench.harness.store import attempt_store as _store
from jitbench.runtime import reduce
from jitbench.runtime.checkpoint import CheckpointError
from jitbench.runtime.config import EXIT_FAILURE
from jitbench.runtime.core import Runtime, describe_failure
from jitbench.runtime.events import EventLog, events_path
from jitbench.runtime.rng import rng_digest
from jitbench.workloads import DataError, build_workload

EXIT_BAD_CHECKPOINT = 77
"""The checkpoint directory belongs to another job, or a checkpoint does not fit."""
EXIT_BAD_INPUT = 78
"""The workload's data or options are unusable, or the world is not the spec's size."""


def _give_up(events: EventLog, code: int, where: str, exc: BaseException) -> int:
    events.emit("error", where=where, error=f"{type(exc).__name__}: {exc}"[:500], code=code,
                durable=True)
    print(f"[jitbench] rank {events.rank}: {where} failed: {type(exc).__name__}: {exc}"[:500],
          file=sys.stderr, flush=True)
    events.emit("exit", code=code, durable=True)
    events.close()
    os._exit(code)


def _wrap_as_newcomer(job: _Job, rt: Runtime) -> None:
    """A newcomer that adopted the survivors' state wraps the model (DDP's construction
    broadcasts rank 0's module states). A member dying meanwhile fails the wrap: this
    rank, which holds the state, takes part in the next membership round as a survivor
    whose re-form failed does (:meth:`Runtime.recover`; the model wrapped again), or
    ends with the strategy's status. The recovery starts after the ``except`` block,
    once the exception and the half-built DDP its traceback holds are gone."""
    failed = None
    try:
        job.wrap()
    except Exception as exc:  # noqa: BLE001 - a member died during the broadcast
        failed = describe_failure(exc)
    if failed is not None:
        rt.recover(*failed)


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class _Job:
    """What one worker process trains with (built once, before it knows whether it
    starts as a rank or waits as a spare)."""

    def __init__(self, spec: RunSpec, run_dir: Path, rt: Runtime, events: EventLog,
                 rank: int, world: int, local_rank: int) -> None:
        self.spec, self.run_dir, self.rt, self.events = spec, run_dir, rt, events
        self.local_rank = local_rank
        torch.set_num_threads(spec.threads_per_rank)
        torch.use_deterministic_algorithms(True, warn_only=True)
        if spec.backend == "nccl":
            torch.cuda.set_device(local_rank)
            self.device = torch.device("cuda", local_rank)
        else:
            self.device = torch.device("cpu")
        _seed_everything(spec.workload.seed)
        self.par = parse_parallel(spec.parallel)
        prepare = ((lambda m: shard_model(m, self.par, self.device)) if self.par.sharded
                   else None)
        try:
            self.wl = build_workload(spec.workload, rank, world, self.device, prepare)
        except (DataError, ValueError) as exc:
            _give_up(events, EXIT_BAD_INPUT, "workload", exc)
        self.has_buffers = any(b.numel() for b in self.wl.model.buffers())
        self.model: DDP | torch.nn.Module | None = None
        self.faults = None
        rt.register(self.wl.model, self.wl.optimizer, self.wl.scheduler, scaler=self.wl.scaler,
                    data_state=self.wl.data_state, load_data=self.wl.load_data_state)

    def attach_faults(self, rank: int, attempt: int, world: int, notice_store) -> None:
        self.faults = attach(self.rt, self.spec.faults, rank=rank, attempt=attempt,
                             world_size=world, device_index=self.local_rank,
                             backend=self.spec.backend, seed=self.spec.workload.seed,
                             run_dir=self.run_dir, ckpt_dir=self.rt.config.ckpt_dir,
                             events=self.events, notice_store=notice_store)

    def wrap(self) -> None:
        """(Re-)wrap the model in DDP on the current default process group, with the
        gradient hook that injects collective faults and marks the posted collective."""
        spec, faults, rt = self.spec, self.faults, self.rt
        if self.par.sharded:  # FSDP2 (hsdp): the sharded module reduces by itself
            self.model = self.wl.model
            return
        # Buffers are broadcast once per step by reduce.broadcast_buffers (train), so
        # that every iteration boundary holds rank 0's buffers on every rank.
        self.model = DDP(self.wl.model,
                         device_ids=[self.local_rank] if spec.backend == "nccl" else None,
                         **reduce.no_forward_buffer_sync())
        hook = reduce.ordered_allreduce_hook if spec.deterministic_reduce else reduce.allreduce_hook
        op = "all_gather" if spec.deterministic_reduce else "all_reduce"
        first_bucket = {"step": -1}
        injector = faults.injector

        def comm_hook(state, bucket):
            step = injector.step
            if first_bucket["step"] != step:  # first bucket of this step's all-reduce
                first_bucket["step"] = step
                rt.enter_collective(step)
                injector.at("collective", step, numel=bucket.buffer().numel(), op=op,
                            grads=bucket.buffer())
                rt.mark_collective(step)
            return hook(state, bucket, timeout_s=faults.collective_timeouts.get(step))

        self.model.register_comm_hook(None, comm_hook)

    def train(self, first: int) -> None:
        """Steps ``first .. spec.steps`` (a step recovered in process is run again)."""
        for step in self.rt.steps(first, self.spec.steps):
            if self.spec.segments:
                apply_segment(self.rt, self.spec, step, self.events)
            with self.rt.step(step) as info:
                self._step(step, info)

    def _step(self, step: int, info: dict) -> None:
        """One optimizer step (its locals, which hold the DDP wrapper and the autograd
        graph, are gone once it returns or its exception has been handled)."""
        spec, wl, injector = self.spec, self.wl, self.faults.injector
        accum = spec.workload.grad_accum
        scaler = wl.scaler
        model = self.model  # re-wrapped after an in-process recovery
        info["rng"] = rng_digest()  # after the deferred RNG restore, before any draw
        injector.step = step
        injector.at("step", step)
        ids: list[int] = []
        micros: list[int] = []
        loss_sum = 0.0
        for micro in range(accum):
            injector.at(f"micro:{micro}", step)
            batch = wl.batch(step, micro)
            ids.extend(batch.sample_ids)
            micros.append((step - 1) * accum + micro)
            last = micro == accum - 1
            if self.par.sharded:
                # FSDP2: gradients are reduced only in the window's last backward; its
                # collectives run inside backward, so the collective point is before it
                model.set_requires_gradient_sync(last)
                loss = wl.loss(model, batch) / accum
                if last:
                    self.rt.enter_collective(step)
                    injector.at("collective", step, op="reduce_scatter")
                    self.rt.mark_collective(step)
                (scaler.scale(loss) if scaler is not None else loss).backward()
                loss_sum += loss.item()
                continue
            # gradients are all-reduced only in the window's last backward
            with model.no_sync() if not last else contextlib.nullcontext():
                loss = wl.loss(model, batch) / accum
                (scaler.scale(loss) if scaler is not None else loss).backward()
            loss_sum += loss.item()
        if self.has_buffers:  # before the optimizer step: a hang here leaves a consistent
            reduce.broadcast_buffers(wl.model)  # state
        injector.at("optimizer", step)
        if scaler is not None:
            before = scaler.get_scale() if scaler.is_enabled() else None
            scaler.step(wl.optimizer)  # skipped (no optimizer step) if a gradient overflowed
            scaler.update()
            if scaler.is_enabled():
                info["scale"] = scaler.get_scale()
                info["growth_tracker"] = int(scaler.state_dict()["_growth_tracker"])
                # update() backs the scale off exactly when the step was skipped
                info["skipped"] = info["scale"] < before
            else:
                info["scale"] = None
        else:
            wl.optimizer.step()
        wl.optimizer.zero_grad(set_to_none=True)
        wl.scheduler.step()
        info.update(loss=loss_sum, lr=wl.scheduler.get_last_lr()[0], sample_ids=ids,
                    micro=micros)

    def finish(self) -> None:
        self.rt.finish(str(self.run_dir / "final" / "state.pt")
                       if self.spec.save_final_state else None)


def main(argv: list[str]) -> int:
    die_with_parent()  # the agent gone (SIGKILLed): SIGTERM us, so we save and exit
    run_dir = Path(argv[0])
    spec = RunSpec.load(run_dir / "spec.json")
    if os.environ.get(ENV_MEMBERS):
        return main_inprocess(run_dir, spec)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    events = EventLog(events_path(run_dir / "events", attempt, rank), rank, attempt)
    events.emit("process", "point", world_size=world, master_port=os.environ.get("MASTER_PORT"),
                ppid=os.getppid(), durable=True)
    if world != spec.world_size:  # a round of --nnodes MIN:MAX with fewer than MAX nodes
        _give_up(events, EXIT_BAD_INPUT, "rendezvous", ValueError(
            f"torch elastic formed a world of {world} ranks; this job trains at "
            f"{spec.world_size} ({spec.nproc} per node x {spec.nnodes} nodes: the world size "
            f"is fixed, its checkpoints and the bitwise oracle depend on it)"))
    rt = Runtime(spec.runtime_config(spec.ckpt_dir or str(run_dir / "ckpt")), events, rank, world)

    events.emit("init", "begin")
    if spec.backend == "nccl":
        torch.cuda.set_device(local_rank)
    dist.init_process_group(spec.backend, store=_store(attempt, spec.pg_timeout_s), rank=rank,
                            world_size=world, timeout=timedelta(seconds=spec.pg_timeout_s))
    job = _Job(spec, run_dir, rt, events, rank, world, local_rank)
    job.attach_faults(rank, attempt, world, _store(attempt, 10.0, client=True))
    job.wrap()
    events.emit("init", "end", workload=job.wl.describe())
    try:
        res = rt.restore()
    except CheckpointError as exc:
        _give_up(events, EXIT_BAD_CHECKPOINT, "restore", exc)
    job.train(res.step + 1)
    job.finish()
    dist.destroy_process_group()
    events.emit("exit", code=0, durable=True)
    events.close()
    return 0


def main_inprocess(run_dir: Path, spec: RunSpec) -> int:
    """A worker of a job that recovers in process (registry launcher ``replicas``:
    ``jit-inprocess``, ``inmem``; :mod:`jitbench.harness.replicas`).

    Slot ``s < world size`` of a fresh agent starts as rank ``s`` of generation 0;
    the other slots, and every process an agent restarted, build the workload and
    wait in the spare pool until the membership assigns them a failed rank's place,
    or a rank of the generation a whole-job restart opened. A spare that finds
    every rank of the generation gone leads that failure; its ``failure`` and
    ``membership`` events go to the lost attempt's log as rank -1.
    """
    from jitbench.harness.replicas import ENV_SLOT
    from jitbench.runtime.inprocess.group import InProcessGroup
    from jitbench.runtime.notice import PeerNotices

    world = spec.world_size
    slot = int(os.environ[ENV_SLOT])
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    spare = slot >= world or restart > 0
    events_dir = run_dir / "events"
    if spare:
        events = EventLog(events_dir / f"spare_slot{slot:03d}_r{restart:03d}.jsonl", -1, restart)
    else:
        events = EventLog(events_path(events_dir, 0, slot), slot, 0)
    events.emit("process", "point", world_size=world, slot=slot, spare=spare,
                ppid=os.getppid(), durable=True)
    events.set_base(gen=0)
    group = InProcessGroup(os.environ[ENV_MEMBERS], world, spec.backend, spec.pg_timeout_s)
    rank = 0 if spare else slot
    rt = Runtime(spec.runtime_config(spec.ckpt_dir or str(run_dir / "ckpt")), events, rank, world)
    events.emit("init", "begin")
    job = _Job(spec, run_dir, rt, events, rank, world, local_rank=0)
    events.emit("init", "end", workload=job.wl.describe())
    def new_generation() -> None:
        # DDP's reducer holds the old group (and an aborted backward leaves it
        # mid-reduction); notices of the old generation must not reach the new one
        job.wrap()
        rt.set_notices(PeerNotices(dist.PrefixStore(f"notice/g{group.gen}", group.store),
                                   group.rank, world))

    def release() -> None:
        job.model = None  # DDP holds the old group

    def lost(gen: int, attempt: int, t_wall: float, dec) -> None:
        log = EventLog(events_path(events_dir, attempt, -1), -1, attempt)
        log.set_base(gen=gen)
        log.emit("failure", trigger="lost", in_phase="spare", slot=slot, found_wall=t_wall,
                 reason=f"every rank of generation {gen} is gone", durable=True)
        log.emit("membership", "begin", trigger="lost", durable=True)
        log.emit("membership", "end", new_gen=dec.gen, dead=dec.dead, hung=dec.hung,
                 source=dec.source, resume_step=dec.resume_step, fallback=dec.fallback,
                 decided_s=dec.decided_s, spares=[], durable=True)
        log.close()

    rt.strategy.bind(rt, group, new_generation, release)
    rt.add_check(group.check)
    if spare:
        cpu0, t0 = time.process_time(), time.monotonic()
        got = group.wait_as_spare(prefer_rank=slot if slot < world else None, on_lost=lost)
        if got is None:  # the job finished without needing this spare
            # what waiting cost (CPU s, every thread): a spare shares the host with ranks
            events.emit("exit", code=0, cpu_s=time.process_time(),
                        wait_cpu_s=time.process_time() - cpu0, wait_s=time.monotonic() - t0,
                        durable=True)
            events.close()
            return 0
        rank = got.rank
        events.rebind(events_path(events_dir, got.attempt, rank), rank, got.attempt)
        events.set_base(gen=got.gen)
        events.emit("process", "point", world_size=world, slot=slot, spare=True,
                    spare_id=group.spare_id, ppid=os.getppid(), durable=True)
        rt.rank = rank
        job.wl.set_rank(rank)
        if got.fresh:  # the generation restarts from the checkpoints: say why
            dec = group.members.wait_decision(got.gen - 1, 60.0)
            events.emit("fallback", "point", reason=dec.fallback, from_gen=got.gen - 1,
                        dead=dec.dead, hung=dec.hung, durable=True)
    else:
        group.join_initial(rank)
    job.attach_faults(rank, group.gen, world,
                      dist.PrefixStore(f"notice/g{group.gen}", group.store))
    restarted = spare and got.fresh  # a rank of a whole-job restart: init like one
    if restarted:
        events.emit("init", "begin")
    newcomer = spare and not got.fresh  # group.joining until it adopted the state
    try:
        group.init_process_group()
    except Exception as exc:  # noqa: BLE001 - a member of the generation never came
        if not newcomer:
            raise
        _give_up(events, EXIT_FAILURE, "join", exc)
    if restarted:
        events.emit("init", "end", workload=job.wl.describe())
    if newcomer:  # the survivors' collectives, in the same order
        dec = group.members.wait_decision(group.gen - 1, 300.0)
        job.faults.injector.at("restore", dec.resume_step + 1)
        try:
            rt.strategy.receive(rt, dec)
        except CheckpointError as exc:
            _give_up(events, EXIT_BAD_CHECKPOINT, "restore", exc)
        except Exception as exc:  # noqa: BLE001 - the source failed during the transfer
            _give_up(events, EXIT_FAILURE, "join", exc)
        _wrap_as_newcomer(job, rt)
        first = rt.completed + 1  # the step after the state received (or re-formed)
    else:
        job.wrap()
        try:
            first = rt.restore().step + 1
        except CheckpointError as exc:
            _give_up(events, EXIT_BAD_CHECKPOINT, "restore", exc)
    job.train(first)
    job.finish()
    group.finished()
    group.leave_process_group()
    events.emit("exit", code=0, durable=True)
    events.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
