"""A GPT-2-style decoder, its optimizer and schedule, trained on bytes.

Architecture after Radford et al., "Language Models are Unsupervised
Multitask Learners" (GPT-2, 2019): token + learned position embeddings,
pre-LayerNorm blocks of causal self-attention and a 4x GELU MLP, a final
LayerNorm and a head tied to the token embedding. Optimizer AdamW
(Loshchilov & Hutter, 2019) with weight decay on matrices only; learning rate
with linear warmup then cosine decay to ``min_lr_ratio`` of the peak (as in
nanoGPT's ``get_lr``), or a step decay at every epoch boundary.

Mixed precision (``extra["amp"]``), checked on CPU with torch 2.14.1:
``torch.autocast("cpu", dtype=torch.bfloat16 | torch.float16)`` both work for
every op of this model (linear, scaled_dot_product_attention, LayerNorm, GELU;
``cross_entropy`` autocasts to float32); parameters, gradients and optimizer
moments stay float32. ``fp16`` trains with ``torch.amp.GradScaler("cpu")``
(loss scaling; an overflowing step is skipped and the scale backs off);
``bf16`` has float32's exponent range and needs no scaler (a disabled scaler
is registered, whose state is ``{}``). On a CPU without native half-precision
GEMM, fp16 steps are about 4x slower than float32 (tiny GPT: 0.095 vs
0.022 s/step, one thread); bf16 about 2x.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from jitbench import errors
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


EXTRA_KEYS = {
    "dropout": "dropout probability (float in [0, 1); default 0.1)",
    "max_bytes": "corpus cap in bytes (int >= 2; default 2,000,000)",
    "amp": "mixed precision: 'bf16', 'fp16' or 'off' (default)",
    "amp_growth_interval": "GradScaler growth interval in steps (int >= 1; default 2000)",
    "schedule": "'warmup-cosine' (default) or 'step-decay' (LR x gamma at every epoch boundary)",
    "lr_gamma": "step-decay factor per epoch (float in (0, 1]; default 0.5)",
}
"""Accepted ``cfg.extra`` keys of the GPT workload."""
AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
SCHEDULES = ("warmup-cosine", "step-decay")


def check_extra(extra: dict) -> None:
    """Validate the GPT workload's ``cfg.extra``.

    Raises:
        ValueError: an unknown key or a value of the wrong type or range (one line).
    """
    unknown = sorted(set(extra) - set(EXTRA_KEYS))
    if unknown:
        raise ValueError(f"unknown gpt option(s) {unknown}; valid: {sorted(EXTRA_KEYS)}")
    d = extra.get("dropout", 0.1)
    if isinstance(d, bool) or not isinstance(d, (int, float)) or not 0 <= d < 1:
        raise ValueError(f"gpt dropout must be a number in [0, 1), got {d!r}")
    mb = extra.get("max_bytes", 2)
    if isinstance(mb, bool) or not isinstance(mb, int) or mb < 2:
        raise ValueError(f"gpt max_bytes must be an integer >= 2, got {mb!r}")
    amp = extra.get("amp", "off")
    if amp not in ("off", *AMP_DTYPES):
        raise ValueError(f"gpt amp must be off, bf16 or fp16, got {amp!r}")
    gi = extra.get("amp_growth_interval", 1)
    if isinstance(gi, bool) or not isinstance(gi, int) or gi < 1:
        raise ValueError(f"gpt amp_growth_interval must be an integer >= 1, got {gi!r}")
    sch = extra.get("schedule", SCHEDULES[0])
    if sch not in SCHEDULES:
        raise ValueError(f"gpt schedule must be one of {', '.join(SCHEDULES)}, got {sch!r}")
    g = extra.get("lr_gamma", 0.5)
    if isinstance(g, bool) or not isinstance(g, (int, float)) or not 0 < g <= 1:
        raise ValueError(f"gpt lr_gamma must be a number in (0, 1], got {g!r}")


class GPTWorkload(Workload):
    """GPT on bytes: AdamW (betas 0.9/0.95, weight decay 0.1), warmup-cosine or step-decay LR.

    ``cfg.extra`` keys: see :data:`EXTRA_KEYS` (``dropout``, ``max_bytes``,
    ``amp``, ``amp_growth_interval``, ``schedule``, ``lr_gamma``). ``prepare_model``
    is applied to the model before the optimizer is built (sharding,
    :mod:`jitbench.harness.parallel`).

    Raises:
        DataError: unusable data path.
        ValueError: unknown size or a bad ``extra`` option.
    """

    name = "gpt"

    def __init__(self, cfg: WorkloadConfig, rank: int, world_size: int,
                 device: torch.device,
                 prepare_model: Callable[[nn.Module], object] | None = None) -> None:
        size = cfg.size or DEFAULT_SIZE
        if size not in SIZES:
            raise ValueError(errors.unknown("gpt size", size, SIZES))
        check_extra(cfg.extra)
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
        if prepare_model is not None:  # e.g. FSDP2 fully_shard: before the optimizer
            prepare_model(self.model)
        decay = [p for n, p in self.model.named_parameters() if p.dim() >= 2]
        no_decay = [p for n, p in self.model.named_parameters() if p.dim() < 2]
        lr = cfg.lr if cfg.lr is not None else 3e-3
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
            lr=lr, betas=(0.9, 0.95), foreach=False)
        self.schedule = cfg.extra.get("schedule", SCHEDULES[0])
        if self.schedule == "step-decay":
            # one epoch of optimizer steps; the LR is multiplied by lr_gamma at each boundary
            self.steps_per_epoch = max(1, self.sampler.batches_per_epoch // cfg.grad_accum)
            self.scheduler = torch.optim.lr_scheduler.StepLR(
                self.optimizer, step_size=self.steps_per_epoch,
                gamma=float(cfg.extra.get("lr_gamma", 0.5)))
        else:
            self.scheduler = torch.optim.lr_scheduler.LambdaLR(
                self.optimizer, WarmupCosine(max(1, cfg.steps // 10), cfg.steps))
        self.amp = cfg.extra.get("amp", "off")
        self.scaler = None
        if self.amp != "off":
            self.scaler = torch.amp.GradScaler(
                device.type, enabled=self.amp == "fp16",
                growth_interval=int(cfg.extra.get("amp_growth_interval", 2000)))
        self.mcfg = mcfg
        self.cfg = cfg

    def autocast(self):
        """``torch.autocast`` with the configured dtype (a no-op context without AMP)."""
        if self.amp == "off":
            return super().autocast()
        return torch.autocast(self.device.type, dtype=AMP_DTYPES[self.amp])

    def batch(self, step: int, micro: int = 0) -> Batch:
        ids = self.sampler.ids(step, micro)
        x, y = self.data.get(ids)
        return Batch(x.to(self.device), y.to(self.device), ids)

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        """Mean next-byte cross-entropy (nats per token, float32 scalar)."""
        with self.autocast():
            logits = model(batch.inputs)  # (B, T, vocab), float32 or the AMP dtype
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)),
                               batch.targets.reshape(-1))

    def describe(self) -> dict:
        return {**super().describe(), "size": self.cfg.size or DEFAULT_SIZE,
                "block_size": self.mcfg.block_size, "data": self.cfg.data or "stdlib",
                "data_sha256": self.data.sha256, "samples": self.data.num_samples,
                "batches_per_epoch": self.sampler.batches_per_epoch, "amp": self.amp,
                "schedule": self.schedule}
