"""The per-rank training process that the elastic agent starts.

``python -m jitbench.harness.worker RUN_DIR`` reads ``RUN_DIR/spec.json`` and
trains the spec's workload under the JIT runtime (user-level API), with the
fault injector attached. Rank, world size and the attempt (restart count) come
from the agent's environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``/``MASTER_PORT``, ``TORCHELASTIC_RESTART_COUNT``).

The process group is built on the agent's TCPStore wrapped in a
``PrefixStore`` keyed by the attempt, so a restarted attempt never reads a
peer address left by the previous one (DESIGN.md, "Known traps").
"""

from __future__ import annotations

import os
import random
import sys
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from jitbench.faults import Injector, make_fault
from jitbench.harness.spec import RunSpec
from jitbench.runtime import reduce
from jitbench.runtime.events import EventLog, events_path
from jitbench.runtime.jit import Runtime
from jitbench.workloads import build_workload


def _store(attempt: int, timeout_s: float) -> dist.Store:
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "False") == "True"
    is_master = not agent_store and int(os.environ["RANK"]) == 0
    base = dist.TCPStore(host, port, is_master=is_master, timeout=timedelta(seconds=timeout_s),
                         wait_for_workers=False)
    return dist.PrefixStore(f"jitbench/attempt{attempt}", base)


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def main(argv: list[str]) -> int:
    run_dir = Path(argv[0])
    spec = RunSpec.load(run_dir / "spec.json")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    events = EventLog(events_path(run_dir / "events", attempt, rank), rank, attempt)
    events.emit("process", "point", world_size=world, durable=True)
    rt = Runtime(spec.runtime_config(str(run_dir / "ckpt")), events, rank, world)

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
    wl = build_workload(spec.workload, rank, world, device)
    model = DDP(wl.model, device_ids=[local_rank] if spec.backend == "nccl" else None)
    injector = Injector([make_fault(f) for f in spec.faults], rank, attempt,
                        run_dir / "faults_fired", events)
    hook = reduce.ordered_allreduce_hook if spec.deterministic_reduce else reduce.allreduce_hook
    first_bucket = {"step": -1}

    def comm_hook(state, bucket):
        step = injector.step
        if first_bucket["step"] != step:  # first bucket of this step's all-reduce
            first_bucket["step"] = step
            injector.at("collective", step)
        return hook(state, bucket)

    model.register_comm_hook(None, comm_hook)
    rt.register(wl.model, wl.optimizer, wl.scheduler, data_state=wl.data_state)
    events.emit("init", "end", workload=wl.describe())

    res = rt.restore()
    accum = spec.workload.grad_accum
    for step in range(res.step + 1, spec.steps + 1):
        with rt.step(step) as info:
            injector.step = step
            injector.at("step", step)
            ids: list[int] = []
            loss_sum = 0.0
            for micro in range(accum):
                batch = wl.batch(step, micro)
                ids.extend(batch.sample_ids)
                if micro < accum - 1:
                    with model.no_sync():
                        loss = wl.loss(model, batch) / accum
                        loss.backward()
                else:
                    loss = wl.loss(model, batch) / accum
                    loss.backward()
                loss_sum += loss.item()
            wl.optimizer.step()
            wl.optimizer.zero_grad(set_to_none=True)
            wl.scheduler.step()
            info.update(loss=loss_sum, lr=wl.scheduler.get_last_lr()[0], sample_ids=ids)
    rt.finish(str(run_dir / "final" / "state.pt") if spec.save_final_state else None)
    dist.destroy_process_group()
    events.emit("exit", code=0, durable=True)
    events.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
