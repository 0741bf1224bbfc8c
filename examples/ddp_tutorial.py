"""Plain DDP, in the style of PyTorch's "Getting Started with Distributed Data Parallel".

A small model, synthetic deterministic data, the environment torchrun sets
(RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT). No checkpoints: after
a failure it starts again from step 0.

    torchrun --nproc-per-node 2 examples/ddp_tutorial.py --steps 30
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP


class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank = dist.get_rank()
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    print(f"Running basic DDP example on rank {rank}.")

    torch.manual_seed(args.seed)
    model = ToyModel().to(device)
    ddp_model = DDP(model, device_ids=[local_rank] if use_cuda else None)

    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=args.lr)

    # each rank draws its own deterministic stream of synthetic samples
    gen = torch.Generator().manual_seed(args.seed * 1000 + rank)
    for step in range(args.steps):
        inputs = torch.randn(args.batch_size, 10, generator=gen).to(device)
        labels = torch.randn(args.batch_size, 5, generator=gen).to(device)
        optimizer.zero_grad()
        outputs = ddp_model(inputs)
        loss = loss_fn(outputs, labels)
        loss.backward()
        optimizer.step()
        if rank == 0 and step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}")

    dist.destroy_process_group()
    print(f"Finished running basic DDP example on rank {rank}.")


if __name__ == "__main__":
    main()
