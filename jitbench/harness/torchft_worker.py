"""One torchft replica: ``python -m jitbench.harness.torchft_worker RUN_DIR``.

Started by its own elastic agent (:mod:`jitbench.harness.torchft_launch`),
one process per replica group. ``JITBENCH_SLOT`` is the jitbench rank (the
data shard, the fault plan's rank, replica id ``jitbench<slot>``),
``TORCHFT_LIGHTHOUSE`` the Lighthouse, ``JITBENCH_MEMBERS`` the harness's
store (start barrier of the first attempt), ``TORCHELASTIC_RESTART_COUNT``
the attempt of this slot (a replacement has attempt > 0).

The step loop is torchft's (see :mod:`jitbench.runtime.strategies.torchft`):
``zero_grad`` (quorum; a replacement heals here), forward/backward through
torchft's DDP, ``step`` (commits only if ``should_commit``). The step number
is torchft's committed step + 1, so a step that was not committed runs again
with the same batch. Events are the same as the runtime's (``init``,
``restore``, ``step`` begin/end with ``loss``, ``sample_ids``, ``micro``,
``failure``, ``fault``, ``done``, ``exit``) plus, on each step end,
``replicas`` (participants of the quorum) and ``digest`` (SHA-1 of the
parameters after the step: equal on every rank that ran the step with the
same state). A step that was not committed gets a ``step_discarded`` point
instead of an end. Rank 0 writes ``final/state.pt`` (model, optimizer,
scheduler, step) at the end.
"""

from __future__ import annotations

import faulthandler
import hashlib
import logging
import os
import random
import signal
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from jitbench.faults.attach import attach
from jitbench.harness.launch import die_with_parent
from jitbench.harness.spec import RunSpec
from jitbench.runtime import checkpoint as ckpt
from jitbench.runtime.events import EventLog, events_path
from jitbench.runtime.state import to_bytes
from jitbench.runtime.strategies.torchft import EXIT_STUCK, LIVENESS_S, make_manager, wrap_model
from jitbench.workloads import build_workload

ENV_SLOT = "JITBENCH_SLOT"
ENV_MEMBERS = "JITBENCH_MEMBERS"
ENV_LIGHTHOUSE = "TORCHFT_LIGHTHOUSE"
JOB_DONE = "job_done"
"""Store key set by the first replica that finished every step."""


class _NoRuntime:
    """What :func:`jitbench.faults.attach.attach` asks of a runtime, for a worker
    without one: peer notices and GPU health checks are the jitbench runtime's
    (torchft runs neither; the faults that need them are refused up front). It is
    never ``leaving``: besides its training thread (and a fault), only the liveness
    probe (:func:`_liveness`) ends this process, and only while a step is stuck, so
    the training thread is not going on to an injection point."""

    leaving = False
    """Never (see the class docstring)."""

    def __init__(self) -> None:
        self.leave_lock = threading.RLock()

    def set_notices(self, notices) -> None:
        pass

    def add_check(self, check) -> None:
        pass


def _digest(model: torch.nn.Module) -> str:
    h = hashlib.sha1()
    for p in model.parameters():
        h.update(p.detach().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def _liveness(events: EventLog, progress: dict) -> None:
    """The scheduler's liveness probe: end the process when one step's compute
    (forward, backward, all-reduce, commit) has run for :data:`LIVENESS_S`. Waiting
    for a quorum is not counted: torchft holds a healthy replica there."""
    while True:
        time.sleep(0.25)
        since = progress.get("in_step_since")
        if since is not None and time.monotonic() - since > LIVENESS_S:
            faulthandler.dump_traceback(all_threads=False)
            events.emit("failure", trigger="liveness", in_phase="compute",
                        step=progress.get("step"), durable=True)
            events.emit("exit", code=EXIT_STUCK, durable=True)
            events.close()
            os._exit(EXIT_STUCK)


def main(argv: list[str]) -> int:
    die_with_parent()
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # stacks into agent.log
    log = logging.StreamHandler(sys.stderr)
    log.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logging.getLogger("torchft").addHandler(log)
    logging.getLogger("torchft").setLevel(logging.INFO)
    run_dir = Path(argv[0])
    spec = RunSpec.load(run_dir / "spec.json")
    rank, world = int(os.environ[ENV_SLOT]), spec.world_size
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    events = EventLog(events_path(run_dir / "events", attempt, rank), rank, attempt)
    events.emit("process", "point", world_size=world, master_port=os.environ.get("MASTER_PORT"),
                ppid=os.getppid(), durable=True)
    events.emit("init", "begin")
    torch.set_num_threads(spec.threads_per_rank)
    torch.use_deterministic_algorithms(True, warn_only=True)
    random.seed(spec.workload.seed)
    np.random.seed(spec.workload.seed)
    torch.manual_seed(spec.workload.seed)
    wl = build_workload(spec.workload, rank, world, torch.device("cpu"))
    healed: dict = {}

    def state_dict() -> dict:
        return {"model": wl.model.state_dict(), "optimizer": wl.optimizer.state_dict(),
                "scheduler": wl.scheduler.state_dict(), "rng": torch.get_rng_state()}

    def load_state_dict(sd: dict) -> None:
        wl.model.load_state_dict(sd["model"])
        wl.optimizer.load_state_dict(sd["optimizer"])
        wl.scheduler.load_state_dict(sd["scheduler"])
        torch.set_rng_state(sd["rng"])
        healed["yes"] = True

    manager = make_manager(replica_id=f"jitbench{rank}", lighthouse=os.environ[ENV_LIGHTHOUSE],
                           timeout_s=spec.hang_floor_s, state_dict=state_dict,
                           load_state_dict=load_state_dict)
    members = dist.TCPStore(*os.environ[ENV_MEMBERS].rsplit(":", 1)[:1],
                            int(os.environ[ENV_MEMBERS].rsplit(":", 1)[1]), is_master=False,
                            timeout=timedelta(seconds=120), wait_for_workers=False)
    if attempt == 0:  # the job starts with every replica (the first quorum holds all)
        members.add("started", 1)
        while int(members.add("started", 0)) < world:
            time.sleep(0.02)
    _late(events, members, attempt)
    notices = dist.PrefixStore(f"jitbench/notices/{rank}/{attempt}", members)
    faults = attach(_NoRuntime(), spec.faults, rank=rank, attempt=attempt, world_size=world,
                    device_index=0, backend="gloo", seed=spec.workload.seed, run_dir=run_dir,
                    ckpt_dir=run_dir / "ckpt", events=events, notice_store=notices)
    injector = faults.injector
    first_bucket = {"step": -1}

    def before_allreduce(bucket) -> None:
        step = injector.step
        if first_bucket["step"] != step:
            first_bucket["step"] = step
            injector.at("collective", step, numel=bucket.buffer().numel(), op="all_reduce")

    from torchft.optim import OptimizerWrapper

    model = wrap_model(manager, wl.model, before_allreduce)
    optimizer = OptimizerWrapper(manager, wl.optimizer)
    events.emit("init", "end", workload=wl.describe(), replica_id=f"jitbench{rank}")
    progress: dict = {"in_step_since": None, "step": 0}
    threading.Thread(target=_liveness, args=(events, progress), daemon=True).start()

    accum = spec.workload.grad_accum
    first = True
    while True:
        if first:
            events.emit("restore", "begin", durable=True)
        optimizer.zero_grad(set_to_none=True)  # quorum; a replacement heals here
        step = manager.current_step() + 1
        if first and not healed:
            _late(events, members, attempt)  # alone in its quorum: the others are gone
        if first:
            kind = "heal" if healed else "fresh"
            events.emit("restore", "end", step=step - 1, kind=kind, ok=True,
                        source="torchft" if healed else None,
                        replicas=manager.num_participants(), durable=True)
            first = False
        if step > spec.steps:
            break
        events.emit("step", "begin", step=step, cpu_s=time.process_time())
        t0 = time.monotonic()
        progress["in_step_since"], progress["step"] = t0, step
        injector.step = step
        injector.at("step", step)
        ids: list[int] = []
        micros: list[int] = []
        loss_sum = 0.0
        error = None
        try:
            for micro in range(accum):
                injector.at(f"micro:{micro}", step)
                batch = wl.batch(step, micro)
                ids.extend(batch.sample_ids)
                micros.append((step - 1) * accum + micro)
                ctx = model.no_sync() if micro < accum - 1 else _null()
                with ctx:
                    loss = wl.loss(model, batch) / accum
                    loss.backward()
                loss_sum += loss.item()
        except Exception as exc:  # noqa: BLE001 (torchft 0.2.0 on gloo: see the strategy)
            error = f"{type(exc).__name__}: {exc}"[:300]
            manager.report_error(exc)
            model = wrap_model(manager, wl.model, before_allreduce)
        if error is None and manager.errored() is not None:
            error = str(manager.errored().original_exception)[:300]
        replicas = manager.num_participants()
        injector.at("optimizer", step)  # after the gradient collective, before the update
        optimizer.step()  # should_commit: the optimizer steps only if every replica agrees
        committed = manager.current_step() == step
        progress["in_step_since"] = None
        if not committed or error is not None:
            events.emit("failure", trigger="collective_error" if error else "not_committed",
                        in_phase="compute", step=step, error=error, replicas=replicas,
                        durable=True)
        if not committed:
            events.emit("step_discarded", step=step, replicas=replicas)
            continue
        wl.scheduler.step()
        dur = time.monotonic() - t0
        events.emit("step", "end", step=step, dur_s=dur, loss=loss_sum,
                    lr=wl.scheduler.get_last_lr()[0], sample_ids=ids, micro=micros,
                    replicas=replicas, digest=_digest(wl.model))
    if rank == 0 and spec.save_final_state:
        path = run_dir / "final" / "state.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        ckpt.write_durable(path, to_bytes({"model": wl.model.state_dict(),
                                           "optimizer": wl.optimizer.state_dict(),
                                           "scheduler": wl.scheduler.state_dict(),
                                           "step": manager.current_step()}))
    events.emit("done", step=manager.current_step(), durable=True)
    # a heal happens inside a quorum both sides attend: nothing is owed to anyone now
    members.set(JOB_DONE, "1")
    manager.shutdown(wait=False)
    events.emit("exit", code=0, durable=True)
    events.close()
    os._exit(0)


def _late(events: EventLog, members, attempt: int) -> None:
    """A replacement that arrives after the survivors finished: nothing to join."""
    if attempt > 0 and members.check([JOB_DONE]):
        events.emit("warning", where="torchft", message="the job finished before this "
                    "replacement joined; it leaves without training", late=True, durable=True)
        events.emit("exit", code=0, durable=True)
        events.close()
        os._exit(0)


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
