"""A GPT-2-style decoder, its optimizer and schedule, trained on bytes.

Architecture after Radford et al., "Language Models are Unsupervised
Multitask Learners" (GPT-2, 2019): token + learned position embeddings,
pre-LayerNorm blocks of causal self-attention and a 4x GELU MLP, a final
LayerNorm and a head tied to the token embedding. Optimizer AdamW
(Loshchilov & Hutter, 2019) with weight decay on matrices only; learning rate
with linear warmup then cosine decay to ``min_lr_ratio`` of the peak (as in
nanoGPT's ``get_lr``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from jitbench.workloads.base import Batch, PositionedSampler, Workload, WorkloadConfig
from jitbench.workloads.text import ByteWindows, read_text, stdlib_corpus


@dataclass(frozen=True)
class GPTConfig:
    """Model shape."""

    block_size: int = 64
    """Context length T (tokens)."""
    vocab_size: int = 256
    """Byte-level vocabulary."""
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    dropout: float = 0.1
    """Dropout probability (attention, residual and embedding), exercises the RNG streams."""


SIZES = {
    "tiny": GPTConfig(block_size=64, n_layer=2, n_head=4, n_embd=64),
    "small": GPTConfig(block_size=128, n_layer=4, n_head=4, n_embd=128),
    "medium": GPTConfig(block_size=256, n_layer=6, n_head=6, n_embd=384),
    "gpt2": GPTConfig(block_size=1024, n_layer=12, n_head=12, n_embd=768),
}
DEFAULT_SIZE = "small"


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention (``scaled_dot_product_attention``)."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.dropout = cfg.dropout
        self.resid_drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape  # (B, T, C)
        q, k, v = self.qkv(x).split(C, dim=2)  # 3 x (B, T, C)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                   for t in (q, k, v))  # (B, H, T, C/H)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C)
        return self.resid_drop(self.proj(y))


class Block(nn.Module):
    """Pre-LayerNorm transformer block."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = nn.Sequential(nn.Linear(cfg.n_embd, 4 * cfg.n_embd), nn.GELU(),
                                 nn.Linear(4 * cfg.n_embd, cfg.n_embd), nn.Dropout(cfg.dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))  # (B, T, C)
        return x + self.mlp(self.ln2(x))  # (B, T, C)


class GPT(nn.Module):
    """GPT-2-style decoder. ``forward(idx: (B, T) int64) -> logits (B, T, vocab)``."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.head.weight = self.wte.weight  # weight tying (GPT-2)
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        B, T = idx.shape  # (B, T)
        pos = torch.arange(T, device=idx.device)  # (T,)
        x = self.drop(self.wte(idx) + self.wpe(pos))  # (B, T, C)
        for blk in self.blocks:
            x = blk(x)  # (B, T, C)
        return self.head(self.ln_f(x))  # (B, T, vocab)


class WarmupCosine:
    """LR multiplier: linear warmup over ``warmup`` steps, then cosine to ``min_ratio``.

    A callable object (not a lambda) so ``LambdaLR.state_dict`` captures it.
    """

    def __init__(self, warmup: int, total: int, min_ratio: float = 0.1) -> None:
        self.warmup, self.total, self.min_ratio = warmup, total, min_ratio

    def __call__(self, i: int) -> float:
        if i < self.warmup:
            return (i + 1) / self.warmup
        frac = min(1.0, (i - self.warmup) / max(1, self.total - self.warmup))
        return self.min_ratio + (1 - self.min_ratio) * 0.5 * (1 + math.cos(math.pi * frac))


class GPTWorkload(Workload):
    """GPT on bytes: AdamW (betas 0.9/0.95, weight decay 0.1), warmup-cosine LR.

    ``cfg.extra`` keys: ``dropout`` (float), ``max_bytes`` (int, corpus cap).

    Raises:
        DataError: unusable data path.
        ValueError: unknown size.
    """

    name = "gpt"

    def __init__(self, cfg: WorkloadConfig, rank: int, world_size: int,
                 device: torch.device) -> None:
        size = cfg.size or DEFAULT_SIZE
        if size not in SIZES:
            raise ValueError(f"unknown gpt size {size!r}; one of {', '.join(SIZES)}")
        mcfg = SIZES[size]
        if "dropout" in cfg.extra:
            mcfg = GPTConfig(**{**mcfg.__dict__, "dropout": float(cfg.extra["dropout"])})
        max_bytes = int(cfg.extra.get("max_bytes", 2_000_000))
        data = read_text(cfg.data, max_bytes) if cfg.data else stdlib_corpus(max_bytes)
        self.data = ByteWindows(data, mcfg.block_size)
        self.device = device
        self.sampler = PositionedSampler(self.data.num_samples, cfg.batch_size, cfg.grad_accum,
                                         rank, world_size, cfg.seed)
        self.model = GPT(mcfg).to(device)
        decay = [p for n, p in self.model.named_parameters() if p.dim() >= 2]
        no_decay = [p for n, p in self.model.named_parameters() if p.dim() < 2]
        lr = cfg.lr if cfg.lr is not None else 3e-3
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
            lr=lr, betas=(0.9, 0.95), foreach=False)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, WarmupCosine(max(1, cfg.steps // 10), cfg.steps))
        self.mcfg = mcfg
        self.cfg = cfg

    def batch(self, step: int, micro: int = 0) -> Batch:
        ids = self.sampler.ids(step, micro)
        x, y = self.data.get(ids)
        return Batch(x.to(self.device), y.to(self.device), ids)

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        logits = model(batch.inputs)  # (B, T, vocab)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), batch.targets.reshape(-1))

    def describe(self) -> dict:
        return {**super().describe(), "size": self.cfg.size or DEFAULT_SIZE, "block_size": self.mcfg.block_size,
                "data": self.cfg.data or "stdlib", "data_sha256": self.data.sha256,
                "samples": self.data.num_samples}
