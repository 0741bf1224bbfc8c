"""The per-rank training process that the elastic agent starts.

``python -m jitbench.harness.worker RUN_DIR`` reads ``RUN_DIR/spec.json`` and
trains the spec's workload under the JIT runtime (user-level API), with the
fault injector attached. Rank, world size and the attempt (restart count) come
from the agent's environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``/``MASTER_PORT``, ``TORCHELASTIC_RESTART_COUNT``).

The process group is built on the agent's TCPStore wrapped in a
``PrefixStore`` keyed by the attempt, so a restarted attempt never reads a
peer address left by the previous one (DESIGN.md, "Known traps").

Per step the worker records in the step's end event: ``loss``, ``lr``,
``sample_ids`` (this rank's dataset indices in order), ``micro`` (the global
micro-batch indices ``(step - 1) * grad_accum + m`` accumulated into this
optimizer step), ``rng`` (:func:`~jitbench.runtime.rng.rng_digest` at the
start of the step, after any deferred RNG restore) and ``scale`` (the AMP
loss scale, with fp16). Injection points: ``step`` (start of a step),
``micro:<m>`` (before micro-batch ``m`` of the accumulation window) and
``collective`` (the first gradient collective of a step).

Exit statuses besides the runtime's 75/76: :data:`EXIT_BAD_CHECKPOINT` (77,
the checkpoint directory is another job's or a part does not fit) and
:data:`EXIT_BAD_INPUT` (78, the data or a workload option is unusable); the
reason is in an ``error`` event.
"""

from __future__ import annotations

import contextlib
import os
import random
import sys
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from jitbench.faults.attach import attach
from jitbench.harness.launch import die_with_parent
from jitbench.harness.segments import apply_segment
from jitbench.harness.spec import RunSpec
from jitbench.runtime import reduce
from jitbench.runtime.checkpoint import CheckpointError
from jitbench.runtime.core import Runtime
from jitbench.runtime.events import EventLog, events_path
from jitbench.runtime.rng import rng_digest
from jitbench.workloads import DataError, build_workload

EXIT_BAD_CHECKPOINT = 77
"""The checkpoint directory belongs to another job, or a checkpoint does not fit."""
EXIT_BAD_INPUT = 78
"""The workload's data or options are unusable."""


def _give_up(events: EventLog, code: int, where: str, exc: BaseException) -> int:
    events.emit("error", where=where, error=f"{type(exc).__name__}: {exc}"[:500], code=code,
                durable=True)
    events.emit("exit", code=code, durable=True)
    events.close()
    os._exit(code)


def _store(attempt: int, timeout_s: float, client: bool = False) -> dist.Store:
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "False") == "True"
    is_master = not client and not agent_store and int(os.environ["RANK"]) == 0
    base = dist.TCPStore(host, port, is_master=is_master, timeout=timedelta(seconds=timeout_s),
                         wait_for_workers=False)
    return dist.PrefixStore(f"jitbench/attempt{attempt}", base)


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def main(argv: list[str]) -> int:
    die_with_parent()  # the agent gone (SIGKILLed): SIGTERM us, so we save and exit
    run_dir = Path(argv[0])
    spec = RunSpec.load(run_dir / "spec.json")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    events = EventLog(events_path(run_dir / "events", attempt, rank), rank, attempt)
    events.emit("process", "point", world_size=world, master_port=os.environ.get("MASTER_PORT"),
                ppid=os.getppid(), durable=True)
    rt = Runtime(spec.runtime_config(spec.ckpt_dir or str(run_dir / "ckpt")), events, rank, world)

    events.emit("init", "begin")
    torch.set_num_threads(spec.threads_per_rank)
    torch.use_deterministic_algorithms(True, warn_only=True)
    if spec.backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group(spec.backend, store=_store(attempt, spec.pg_timeout_s), rank=rank,
                            world_size=world, timeout=timedelta(seconds=spec.pg_timeout_s))
    _seed_everything(spec.workload.seed)
    try:
        wl = build_workload(spec.workload, rank, world, device)
    except (DataError, ValueError) as exc:
        _give_up(events, EXIT_BAD_INPUT, "workload", exc)
    # Buffers are broadcast once per step by reduce.broadcast_buffers (below), so
    # that every iteration boundary holds rank 0's buffers on every rank.
    model = DDP(wl.model, device_ids=[local_rank] if spec.backend == "nccl" else None,
                **reduce.no_forward_buffer_sync())
    has_buffers = any(b.numel() for b in wl.model.buffers())
    faults = attach(rt, spec.faults, rank=rank, attempt=attempt, world_size=world,
                    device_index=local_rank, backend=spec.backend, seed=spec.workload.seed,
                    run_dir=run_dir, ckpt_dir=rt.config.ckpt_dir, events=events,
                    notice_store=_store(attempt, 10.0, client=True))
    injector = faults.injector
    hook = reduce.ordered_allreduce_hook if spec.deterministic_reduce else reduce.allreduce_hook
    op = "all_gather" if spec.deterministic_reduce else "all_reduce"
    first_bucket = {"step": -1}

    def comm_hook(state, bucket):
        step = injector.step
        if first_bucket["step"] != step:  # first bucket of this step's all-reduce
            first_bucket["step"] = step
            injector.at("collective", step, numel=bucket.buffer().numel(), op=op)
        return hook(state, bucket, timeout_s=faults.collective_timeouts.get(step))

    model.register_comm_hook(None, comm_hook)
    scaler = wl.scaler
    rt.register(wl.model, wl.optimizer, wl.scheduler, scaler=scaler, data_state=wl.data_state,
                load_data=wl.load_data_state)
    events.emit("init", "end", workload=wl.describe())

    try:
        res = rt.restore()
    except CheckpointError as exc:
        _give_up(events, EXIT_BAD_CHECKPOINT, "restore", exc)
    accum = spec.workload.grad_accum
    for step in range(res.step + 1, spec.steps + 1):
        if spec.segments:
            apply_segment(rt, spec, step, events)
        with rt.step(step) as info:
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
                # gradients are all-reduced only in the window's last backward
                with model.no_sync() if micro < accum - 1 else contextlib.nullcontext():
                    loss = wl.loss(model, batch) / accum
                    (scaler.scale(loss) if scaler is not None else loss).backward()
                loss_sum += loss.item()
            if has_buffers:  # before the optimizer step: a hang here leaves a consistent state
                reduce.broadcast_buffers(wl.model)
            if scaler is not None:
                scaler.step(wl.optimizer)  # skipped (no optimizer step) if a gradient overflowed
                scaler.update()
                info["scale"] = scaler.get_scale() if scaler.is_enabled() else None
            else:
                wl.optimizer.step()
            wl.optimizer.zero_grad(set_to_none=True)
            wl.scheduler.step()
            info.update(loss=loss_sum, lr=wl.scheduler.get_last_lr()[0], sample_ids=ids,
                        micro=micros)
    rt.finish(str(run_dir / "final" / "state.pt") if spec.save_final_state else None)
    dist.destroy_process_group()
    events.emit("exit", code=0, durable=True)
    events.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
