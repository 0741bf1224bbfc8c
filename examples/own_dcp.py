"""DDP training that writes its own checkpoints with torch.distributed.checkpoint (DCP)
every N steps and resumes from the newest one, following PyTorch's "Getting Started
with Distributed Checkpoint (DCP)" recipe (a Stateful AppState holding the model and
optimizer through get_state_dict/set_state_dict).

The batch of step s on rank r is drawn from a generator seeded by (seed, s, r), so a
resumed run trains on exactly the batches an uninterrupted one would.

    torchrun --nproc-per-node 2 examples/own_dcp.py --steps 20 --ckpt-every 4 \
        --ckpt-dir /tmp/own_dcp_ckpt
"""

import argparse
import os
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful
from torch.nn.parallel import DistributedDataParallel as DDP


class AppState(Stateful):
    """What a checkpoint holds: model, optimizer, LR scheduler and the step."""

    def __init__(self, model, optimizer, scheduler, step=0):
        self.model, self.optimizer, self.scheduler, self.step = model, optimizer, scheduler, step

    def state_dict(self):
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        return {"model": model_sd, "optim": optim_sd, "sched": self.scheduler.state_dict(),
                "step": self.step}

    def load_state_dict(self, state_dict):
        set_state_dict(self.model, self.optimizer, model_state_dict=state_dict["model"],
                       optim_state_dict=state_dict["optim"])
        self.scheduler.load_state_dict(state_dict["sched"])
        self.step = state_dict["step"]


def latest_checkpoint(ckpt_dir):
    """The newest complete checkpoint (DCP writes .metadata last), or None."""
    done = [d for d in Path(ckpt_dir).glob("step_*") if (d / ".metadata").exists()]
    return max(done, key=lambda d: int(d.name.split("_")[1]), default=None)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--ckpt-every", type=int, default=4)
    p.add_argument("--ckpt-dir", default="own_dcp_ckpt")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)

    torch.manual_seed(args.seed)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to(device)
    model = DDP(model, device_ids=[local_rank] if cuda else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=5, gamma=0.5)
    state = AppState(model, optimizer, scheduler)

    ckpt = latest_checkpoint(args.ckpt_dir)
    if ckpt is not None:
        dcp.load({"app": state}, checkpoint_id=str(ckpt))
        if rank == 0:
            print(f"resumed from {ckpt} at step {state.step}")

    loss_fn = nn.MSELoss()
    for step in range(state.step + 1, args.steps + 1):
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + step * 1009 + rank)
        x = torch.randn(args.batch_size, 16, generator=g).to(device)
        y = torch.randn(args.batch_size, 4, generator=g).to(device)
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        scheduler.step()
        state.step = step
        if step % args.ckpt_every == 0:
            dcp.save({"app": state}, checkpoint_id=str(Path(args.ckpt_dir) / f"step_{step}"))
        if rank == 0 and step % 5 == 0:
            print(f"step {step} loss {loss.item():.4f}")

    dist.destroy_process_group()


if __name__ == "__main__":
    main()
