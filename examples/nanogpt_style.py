"""A nanoGPT-style training script, shrunk to run in seconds on CPUs.

What it shares with nanoGPT's train.py: a decoder-only transformer, AdamW with
weight decay on matrices only, gradient accumulation over micro-batches with
``require_backward_grad_sync`` set on the last one, AMP with a GradScaler
(enabled only for float16 on CUDA), a warmup + cosine learning-rate schedule
computed from the iteration number, gradient clipping. Unlike nanoGPT the
batches come from a DataLoader with a DistributedSampler over a synthetic,
deterministic token stream. No checkpoints: a restart trains from iteration 0.

    torchrun --nproc-per-node 2 examples/nanogpt_style.py --max-iters 20
"""

import argparse
import math
import os
from contextlib import nullcontext

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = nn.MultiheadAttention(n_embd, n_head, batch_first=True)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(),
                                 nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        t = x.size(1)
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device), 1)
        h = self.ln_1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)

    def forward(self, idx, targets):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


class TokenStream(Dataset):
    """Windows of a synthetic token sequence (a fixed random walk over the vocabulary)."""

    def __init__(self, n_tokens, block_size, vocab_size, seed):
        g = torch.Generator().manual_seed(seed)
        steps = torch.randint(-2, 3, (n_tokens,), generator=g)
        self.data = torch.cumsum(steps, 0).remainder(vocab_size)
        self.block_size = block_size

    def __len__(self):
        return len(self.data) - self.block_size - 1

    def __getitem__(self, i):
        chunk = self.data[i:i + self.block_size + 1]
        return chunk[:-1], chunk[1:]


def get_lr(it, args):
    """Linear warmup, then cosine decay to min_lr (nanoGPT's schedule)."""
    if it < args.warmup_iters:
        return args.learning_rate * (it + 1) / (args.warmup_iters + 1)
    if it > args.lr_decay_iters:
        return args.min_lr
    ratio = (it - args.warmup_iters) / (args.lr_decay_iters - args.warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * ratio))
    return args.min_lr + coeff * (args.learning_rate - args.min_lr)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--max-iters", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--gradient-accumulation-steps", type=int, default=2)
    p.add_argument("--n-layer", type=int, default=1)
    p.add_argument("--n-head", type=int, default=2)
    p.add_argument("--n-embd", type=int, default=32)
    p.add_argument("--vocab-size", type=int, default=32)
    p.add_argument("--learning-rate", type=float, default=1e-3)
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--warmup-iters", type=int, default=4)
    p.add_argument("--lr-decay-iters", type=int, default=20)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--dtype", default="float16")
    p.add_argument("--seed", type=int, default=1337)
    args = p.parse_args()

    cuda = torch.cuda.is_available()
    dist.init_process_group(backend="nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    device = f"cuda:{local_rank}" if cuda else "cpu"
    if cuda:
        torch.cuda.set_device(device)
    master = rank == 0
    torch.manual_seed(args.seed)

    vocab = args.vocab_size
    model = GPT(vocab, args.block_size, n_layer=args.n_layer, n_head=args.n_head,
                n_embd=args.n_embd).to(device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=args.learning_rate, betas=(0.9, 0.95))
    use_fp16 = cuda and args.dtype == "float16"
    scaler = torch.amp.GradScaler("cuda", enabled=use_fp16)
    ctx = (torch.autocast("cuda", dtype=torch.float16 if use_fp16 else torch.bfloat16)
           if cuda else nullcontext())
    model = DDP(model, device_ids=[local_rank] if cuda else None)

    data = TokenStream(4096, args.block_size, vocab, args.seed)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True,
                                 seed=args.seed, drop_last=True)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler, drop_last=True)

    epoch = 0
    sampler.set_epoch(epoch)
    batches = iter(loader)

    def next_batch():
        nonlocal epoch, batches
        try:
            return next(batches)
        except StopIteration:
            epoch += 1
            sampler.set_epoch(epoch)
            batches = iter(loader)
            return next(batches)

    for iter_num in range(args.max_iters):
        lr = get_lr(iter_num, args)
        for group in optimizer.param_groups:
            group["lr"] = lr
        for micro_step in range(args.gradient_accumulation_steps):
            model.require_backward_grad_sync = (
                micro_step == args.gradient_accumulation_steps - 1)
            x, y = (t.to(device) for t in next_batch())
            with ctx:
                loss = model(x, y) / args.gradient_accumulation_steps
            scaler.scale(loss).backward()
        if args.grad_clip:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        if master and iter_num % 5 == 0:
            print(f"iter {iter_num}: loss {loss.item() * args.gradient_accumulation_steps:.4f}, "
                  f"lr {lr:.2e}")

    dist.destroy_process_group()


if __name__ == "__main__":
    main()
