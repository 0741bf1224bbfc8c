"""Byte-level text data for the GPT workload.

The embedded default corpus is the Python standard library's own source: the
``*.py`` files directly inside ``sysconfig.get_paths()["stdlib"]``, sorted by
file name (byte order), concatenated with a ``\\n`` between files, truncated to
``max_bytes``. Every CPython installation ships them; the corpus's SHA-256 is
recorded in the run spec so runs on different Python builds are not mixed.

Tokens are bytes (vocabulary 256). The dataset's samples are the
non-overlapping windows ``data[i*T : i*T + T + 1]`` (inputs the first ``T``
bytes, targets the last ``T``), so sample ``i`` is a stable id.
"""

from __future__ import annotations

import hashlib
import os
import sysconfig
from pathlib import Path

import torch

from jitbench.workloads.base import DataError

DEFAULT_MAX_BYTES = 2_000_000


def stdlib_corpus(max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """The default corpus: top-level stdlib ``*.py`` files in sorted order (see module doc).

    Raises:
        DataError: no standard-library sources are found (a stripped install).
    """
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.glob("*.py") if p.is_file())
    chunks, total = [], 0
    for f in files:
        try:
            b = f.read_bytes()
        except OSError:
            continue
        chunks.append(b)
        total += len(b) + 1
        if total >= max_bytes:
            break
    data = b"\n".join(chunks)[:max_bytes]
    if not data:
        raise DataError(f"no standard-library sources under {root}; pass --data PATH")
    return data


def read_text(path: str | os.PathLike, max_bytes: int | None = None) -> bytes:
    """Bytes of a user's text file.

    Raises:
        DataError: missing, not a file, unreadable, or empty.
    """
    p = Path(path)
    if not p.exists():
        raise DataError(f"data path {p} does not exist")
    if not p.is_file():
        raise DataError(f"data path {p} is not a file")
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise DataError(f"data path {p} is unreadable: {exc.strerror}") from exc
    if not data:
        raise DataError(f"data path {p} is empty")
    return data[:max_bytes] if max_bytes else data


class ByteWindows:
    """Non-overlapping windows of a byte string as (input, target) token pairs.

    Args:
        data: the corpus.
        block_size: context length ``T`` (tokens).

    Raises:
        DataError: the corpus is shorter than one window (``T + 1`` bytes).
    """

    def __init__(self, data: bytes, block_size: int) -> None:
        self.tokens = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        self.block_size = block_size
        self.num_samples = (len(data) - 1) // block_size
        if self.num_samples < 1:
            raise DataError(f"text of {len(data)} bytes is shorter than one window of "
                            f"{block_size + 1} bytes")
        self.sha256 = hashlib.sha256(data).hexdigest()

    def get(self, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and targets of samples ``ids``: two int64 tensors of shape (B, T)."""
        T = self.block_size
        rows = torch.stack([self.tokens[i * T:i * T + T + 1] for i in ids]).long()  # (B, T+1)
        return rows[:, :-1], rows[:, 1:]
