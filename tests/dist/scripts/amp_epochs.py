"""A training script with what transparent JIT must follow without the script's help.

An enabled ``GradScaler`` (on CPU), a ``StepLR`` scheduler stepped after the
optimizer, dropout (the torch RNG moves in every forward), a ``DataLoader``
over a ``DistributedSampler`` with shuffling and a partial last batch (its
epoch set with ``set_epoch``), several epochs, a Python-side ``random`` draw
per step that decides the batch's noise, and an SGD optimizer with momentum
(no step counter). Run by tests/dist/test_transparent_jit.py.
"""

import argparse
import random

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--extra-optimizer", action="store_true")
    p.add_argument("--plateau", action="store_true")
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    random.seed(rank)
    model = DDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 2)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    if args.plateau:
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
    else:
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.7)
    extra = torch.optim.Adam(model.parameters(), lr=0.0) if args.extra_optimizer else None
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8, growth_interval=2)
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(44, 8, generator=g), torch.randn(44, 2, generator=g))
    sampler = DistributedSampler(data, shuffle=True, seed=3)
    loader = DataLoader(data, batch_size=5, sampler=sampler)  # 22 per rank: 5,5,5,5,2
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            x = x + random.random() * 0.01
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            if extra is not None:
                extra.step()  # lr 0: moves its own state only
            if args.plateau:
                scheduler.step(loss.item())
            else:
                scheduler.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
