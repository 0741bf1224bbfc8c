"""RNG streams of a process: capture, checkpoint form, restore, digest.

The streams are python's :mod:`random`, numpy's legacy global generator,
torch's CPU generator and every CUDA device's generator (when CUDA is
initialised). A checkpoint holds all of them; restoring sets all of them with
no draw in between.
"""

from __future__ import annotations

import ctypes
import hashlib
import random

import numpy as np
import torch

__all__ = ["capture_rng", "capture_rng_raw", "restore_rng", "rng_digest", "rng_state"]


_MT_BYTES = 624 * 4 + 4
"""Size of numpy's ``mt19937_state`` struct: ``uint32_t key[624]; int pos``."""

_np_seen: tuple = (None, None, None, None)
"""numpy's global bit generator, a view of its MT19937 state (:func:`_view`), a copy
of the state at the last full capture (:func:`_copy`; None: none) and that capture
(:func:`_numpy_state`)."""


def _numpy_state() -> dict:
    """numpy's legacy global stream as ``np.random.get_state(legacy=False)`` returns it.

    ``get_state`` costs 40-50 µs (it builds a dict and a 624-word array), most
    of the runtime's per-step cost, while a training step rarely draws from
    numpy. So the capture compares the stream's raw MT19937 state (2,500 bytes
    read in place at ``bit_generator.ctypes.state_address`` as 625 words,
    :func:`_view`) with a copy of it taken at the last full capture and returns
    that capture again when they are equal and it held no cached Gaussian (``has_gauss`` 0: an unmoved
    key and position then mean that nothing was drawn, so ``has_gauss`` and
    ``gauss`` are unchanged too). Otherwise it calls ``get_state``. The dict
    returned may be shared between captures: treat it as read-only.
    """
    global _np_seen
    bg = np.random.mtrand._rand._bit_generator
    seen_bg, view, raw, state = _np_seen
    if seen_bg is not bg:
        try:
            view = (_view(int(bg.ctypes.state_address))
                    if type(bg).__name__ == "MT19937" else None)
        except (AttributeError, TypeError, ImportError):
            view = None
        raw, state = None, None
    if view is not None and state is not None and not state["has_gauss"]:
        if view == raw:
            return state
    state = np.random.get_state(legacy=False)
    _np_seen = (bg, view, _copy(view), state)
    return state


def _view(addr: int) -> memoryview:
    """A view of the ``_MT_BYTES`` at ``addr`` as 625 native 32-bit words (format ``I``;
    made once per generator). Two such views compare item by item in C with no copy:
    about 4 µs right after a training step, from cold caches, where copying the
    bytes out first (``tobytes``, a 2.5 KB allocation) costs 9-10 µs and a byte-wise
    (``B``) comparison 2 µs even warm (``benchmarks/runtime-step-cost.txt``, run 5)."""
    return memoryview((ctypes.c_char * _MT_BYTES).from_address(addr)).cast("B").cast("I")


def _copy(view: memoryview | None) -> memoryview | None:
    """A copy of ``view``'s words (None for None), comparable with it by ``==``."""
    return None if view is None else memoryview(view.tobytes()).cast("I")


_PY_OFFSET = 16
"""Offset of CPython's ``RandomObject`` fields after ``PyObject_HEAD`` (64-bit builds):
``int index; uint32_t state[624]`` (Modules/_randommodule.c), 2,500 bytes."""

_py_seen: tuple = (None, None, None, None)
"""python's global generator, a view of its raw state (:func:`_view`; None: the layout
differs), a copy of it at the last full capture (:func:`_copy`) and that capture
(:func:`_python_state`)."""


def _python_state() -> tuple:
    """python's global stream as :func:`random.getstate` returns it.

    ``getstate`` builds a tuple of 625 ints (8 µs, up to 30 µs right after a
    training step); the stream rarely moves in a step. So, as for numpy, the
    raw Mersenne-Twister state is compared in place (read at the object's
    address past ``PyObject_HEAD``, :func:`_view`) with a copy of it taken at the
    last full capture, together with ``gauss_next``, and that capture
    is returned again when both are unchanged (the tuple is immutable). The
    layout is checked once against ``getstate``: where it differs (another
    interpreter or build) every capture calls ``getstate``.
    """
    global _py_seen
    inst = random._inst  # type: ignore[attr-defined]
    seen, view, raw, state = _py_seen
    if seen is not inst:
        view, raw, state = _python_view(inst), None, None
    if view is not None and state is not None and inst.gauss_next is state[2]:
        if view == raw:
            return state
    state = inst.getstate()
    _py_seen = (inst, view, _copy(view), state)
    return state


def _python_view(inst: random.Random) -> memoryview | None:
    """A byte view of ``inst``'s raw state (:func:`_view`) if the layout matches its
    ``getstate``, else None."""
    try:
        view = _view(id(inst) + _PY_OFFSET)
        b, words = view.tobytes(), inst.getstate()[1]
        ok = (len(words) == 625 and int.from_bytes(b[:4], "little", signed=True) == words[-1]
              and all(int.from_bytes(b[4 + 4 * i:8 + 4 * i], "little") == words[i]
                      for i in range(624)))
    except (TypeError, ValueError, OverflowError):
        return None
    return view if ok else None


def capture_rng_raw() -> tuple:
    """Every RNG stream's state as its own API returns it, unconverted (the per-step
    hot path; :func:`rng_state` converts it when a checkpoint is written).
    Torch's part is a copy (``torch.get_rng_state`` returns a new tensor);
    python's and numpy's are the last full capture while their stream has not
    moved (:func:`_python_state`, :func:`_numpy_state`), read-only. About 4 µs
    per call on a Xeon core when neither moved, up to 60 µs when both did."""
    # the unmoved-stream checks of _python_state and _numpy_state inline: a function
    # call costs several µs right after a training step (cold caches), the checks
    # themselves about one
    inst, view, raw, py = _py_seen
    if (py is None or random._inst is not inst  # type: ignore[attr-defined]
            or inst.gauss_next is not py[2] or view is None or view != raw):
        py = _python_state()
    bg, view, raw, npst = _np_seen
    if (npst is None or npst["has_gauss"] or np.random.mtrand._rand._bit_generator is not bg
            or view is None or view != raw):
        npst = _numpy_state()
    # is_initialized implies is_available (1.5 µs warm, up to ~70 µs right after a
    # training step on a host without a GPU); its module flag, read first, spares the
    # call (5 µs from cold caches) in a process that never initialised CUDA
    if (_CUDA_FLAGGED is False or torch.cuda._initialized) and torch.cuda.is_initialized():
        # what get_rng_state_all returns (each device's generator state, in device order)
        # without its per-device lazy-init check and device parsing in Python
        gens = getattr(torch.cuda, "default_generators", ())
        cuda = ([g.get_state() for g in gens] if len(gens) == torch.cuda.device_count()
                else torch.cuda.get_rng_state_all())
    else:
        cuda = []
    return py, npst, _torch_state(), cuda


_CUDA_FLAGGED = hasattr(torch.cuda, "_initialized")
"""torch keeps ``torch.cuda._initialized`` (False until CUDA is initialised in this
process; ``is_initialized`` is it and not a bad fork). Without it, every capture calls
``is_initialized``."""


_torch_state = torch.default_generator.get_state
"""torch's CPU stream (a new ``uint8`` tensor of 5,056 bytes): what
``torch.get_rng_state`` returns, without its Python wrapper (a third less from
cold caches right after a training step)."""


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
    global _np_seen, _py_seen
    _np_seen = (None, None, None, None)  # a set state may match the last key with another gauss
    _py_seen = (None, None, None, None)
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
