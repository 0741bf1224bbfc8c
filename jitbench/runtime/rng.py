"""RNG streams of a process: capture, checkpoint form, restore, digest.

The streams are python's :mod:`random`, numpy's legacy global generator,
torch's CPU generator and every CUDA device's generator (when CUDA is
initialised). A checkpoint holds all of them; restoring sets all of them with
no draw in between.
"""

from __future__ import annotations

import hashlib
import random

import numpy as np
import torch

__all__ = ["capture_rng", "capture_rng_raw", "restore_rng", "rng_digest", "rng_state"]


def capture_rng_raw() -> tuple:
    """Every RNG stream's state as its own API returns it, unconverted (the per-step
    hot path; :func:`rng_state` converts it when a checkpoint is written). Each
    part is a copy: ``random.getstate`` and ``np.random.get_state`` build new
    objects, ``torch.get_rng_state`` returns a new tensor."""
    cuda = (torch.cuda.get_rng_state_all()
            if torch.cuda.is_available() and torch.cuda.is_initialized() else [])
    return random.getstate(), np.random.get_state(legacy=False), torch.get_rng_state(), cuda


def capture_rng() -> dict:
    """Every RNG stream of this process: python, numpy, torch CPU, CUDA (if initialised)."""
    return rng_state(capture_rng_raw())


def rng_state(raw: tuple) -> dict:
    """The checkpoint form (tensors and primitive values) of :func:`capture_rng_raw`'s output."""
    py, npst, torch_state, cuda = raw
    state = {
        "python": [py[0], list(py[1]), py[2]],
        "numpy": {"bit_generator": npst["bit_generator"],
                  "key": torch.from_numpy(npst["state"]["key"].astype(np.int64)),
                  "pos": int(npst["state"]["pos"]), "has_gauss": int(npst["has_gauss"]),
                  "gauss": float(npst["gauss"])},
        "torch": torch_state,
        "cuda": list(cuda),
    }
    return state


def restore_rng(state: dict) -> None:
    """Set every RNG stream from :func:`capture_rng`'s output (no draw in between)."""
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    n = state["numpy"]
    np.random.set_state({"bit_generator": n["bit_generator"],
                         "state": {"key": n["key"].numpy().astype(np.uint32), "pos": n["pos"]},
                         "has_gauss": n["has_gauss"], "gauss": n["gauss"]})
    torch.set_rng_state(state["torch"])
    if state.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def rng_digest() -> str:
    """SHA-256 (hex, first 16 digits) of every RNG stream's state in this process.

    Equal digests at the start of a step mean every stream (python, numpy,
    torch CPU, CUDA) will produce the same draws; the harness records it per
    step to check that a restore shifted no stream (field case C6).
    """
    st = capture_rng()
    h = hashlib.sha256()
    h.update(repr(st["python"]).encode())
    n = st["numpy"]
    h.update(n["key"].numpy().tobytes())
    h.update(repr((n["bit_generator"], n["pos"], n["has_gauss"], n["gauss"])).encode())
    h.update(st["torch"].numpy().tobytes())
    for c in st["cuda"]:
        h.update(c.numpy().tobytes())
    return h.hexdigest()[:16]
