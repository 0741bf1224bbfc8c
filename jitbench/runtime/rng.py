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
import struct
import sys

import numpy as np
import torch

__all__ = ["capture_rng", "capture_rng_raw", "restore_rng", "rng_digest", "rng_state"]


_MT_BYTES = 624 * 4 + 4
"""Size of a Mersenne Twister's raw state in both layouts read here: numpy's
``mt19937_state`` (``uint32_t key[624]; int pos``) and CPython's ``RandomObject``
fields (``int index; uint32_t state[624]``)."""

_STRIDE = 156
"""The unmoved-stream checks read every 156th of the 625 words (:func:`_view`): words 0,
156, 312, 468 and 624, that is the position and four key words in both layouts."""

_np_seen: tuple = (None, None, None, None, None, None)
"""numpy's global bit generator, the sampled words of its MT19937 state (:func:`_view`;
None: not readable, every capture is full), a copy of them at the last full capture
(:func:`_copy`), its cached Gaussian in place (:func:`_gauss_view`), a copy of that,
and that capture (:func:`_numpy_state`)."""

_NP_RAND = np.random.mtrand._rand
"""numpy's legacy global ``RandomState``: the object whose bound methods
``np.random.rand``, ``np.random.seed``, ... are (bound once, at numpy's import)."""


def _numpy_state() -> dict:
    """numpy's legacy global stream as ``np.random.get_state(legacy=False)`` returns it.

    ``get_state`` costs 40-50 µs (it builds a dict and a 624-word array), most
    of the runtime's per-step cost, while a training step rarely draws from
    numpy. So the capture compares sampled words of the stream's raw MT19937
    state, read in place at ``bit_generator.ctypes.state_address``
    (:func:`_view`), and the ``RandomState``'s cached Gaussian (``has_gauss``,
    ``gauss``, read in place too, :func:`_gauss_view`) with copies of them taken
    at the last full capture, and returns that capture again when all are
    equal. Otherwise, or where either cannot be read, it calls ``get_state``.
    The dict returned may be shared between captures: treat it as read-only.

    The cached Gaussian must be compared too: a script that seeds the stream
    again and draws brings key and position back to a state it had before,
    with another ``has_gauss`` (``seed(3)``, two normals; then ``seed(3)``, one
    normal: same key and position, ``has_gauss`` 0 and then 1).
    """
    global _np_seen
    bg = _NP_RAND._bit_generator
    seen_bg, view, raw, gview, graw, state = _np_seen
    if seen_bg is not bg:
        view = gview = None
        try:
            if type(bg).__name__ == "MT19937":
                addr = int(bg.ctypes.state_address)
                gview = _gauss_view(_NP_RAND, addr)
                view = _view(addr) if gview is not None else None
        except (AttributeError, TypeError, ImportError, ValueError):
            view = gview = None
        state = None
    if view is not None and state is not None and view == raw and gview == graw:
        return state
    state = np.random.get_state(legacy=False)
    _np_seen = (bg, view, _copy(view), gview, _copy(gview), state)
    return state


def _aug_offset(rs: np.random.RandomState, state_address: int) -> int | None:
    """Offset in ``rs``'s object of its ``aug_bitgen_t`` (``bitgen_t *bit_generator;
    int has_gauss; double gauss``, numpy/random/_common.pxd), found, not assumed:
    ``RandomState`` holds a ``bitgen_t`` whose first field is the MT19937 state's
    address (``state_address``), and the ``aug_bitgen_t`` begins with a pointer to
    that ``bitgen_t``. None if either is not found in the object's basic size."""
    n = type(rs).__basicsize__ // 8
    words = (ctypes.c_uint64 * n).from_address(id(rs))
    bitgen = next((8 * i for i in range(n) if words[i] == state_address), None)
    if bitgen is None:
        return None
    return next((8 * i for i in range(n - 2) if words[i] == id(rs) + bitgen), None)


def _gauss_view(rs: np.random.RandomState, state_address: int) -> memoryview | None:
    """``rs``'s ``has_gauss`` and ``gauss`` in place, as two 64-bit words (the int, its
    padding and the double; a change of the padding alone only costs a full capture),
    or None where the layout is not found or does not read as ``get_state`` reports.

    The layout is checked on a private ``RandomState`` of the same type (a normal drawn
    sets ``has_gauss`` 1 and ``gauss``, the next clears it) and on ``rs`` itself."""
    def reads(obj: np.random.RandomState, off: int) -> tuple[int, float]:
        hg = ctypes.c_int.from_address(id(obj) + off + 8).value
        return hg, ctypes.c_double.from_address(id(obj) + off + 16).value

    def agrees(obj: np.random.RandomState, off: int) -> bool:
        st = obj.get_state(legacy=False)
        return reads(obj, off) == (st["has_gauss"], st["gauss"])

    probe = type(rs)(0)
    off = _aug_offset(probe, int(probe._bit_generator.ctypes.state_address))
    if off is None or off != _aug_offset(rs, state_address) or not agrees(probe, off):
        return None
    probe.standard_normal()
    first = agrees(probe, off) and reads(probe, off)[0] == 1
    probe.standard_normal()
    if not (first and agrees(probe, off) and reads(probe, off)[0] == 0 and agrees(rs, off)):
        return None
    return memoryview((ctypes.c_char * 16).from_address(id(rs) + off + 8)).cast("B").cast("Q")


def _view(addr: int) -> memoryview:
    """The words the unmoved-stream checks compare: of the ``_MT_BYTES`` at ``addr``
    read as 625 native 32-bit words (format ``I``), every :data:`_STRIDE`-th,
    in place (made once per generator).

    Why five words are enough: a Mersenne Twister emits the key word at its
    position and moves the position on; every 624 words drawn it regenerates
    the whole key (the twist; Matsumoto & Nishimura, ACM TOMACS 8(1), 1998), and
    seeding rewrites the key and the position. A stream that moved therefore
    has another position word or a regenerated key, in which each of the four
    sampled key words is unchanged with probability 2^-32: a move goes unseen
    with probability 2^-128 (2^-96 right after numpy's array seeding, which
    sets key word 0, one of the sampled ones, to 0x80000000). A state set from
    outside (``setstate``, ``set_state``) that differs from the last capture only
    in unsampled words would go unseen: no generator produces one. Reading 5 words
    instead of 625 touches 5 cache lines of the generator instead of 40; right
    after a training step, from cold caches, that is most of the checks' cost: the RNG capture less torch's
    stream (both checks and the CUDA check) went from 19.9 to 11.5 µs per step
    (``benchmarks/runtime-step-cost.txt``, run 7, medians)."""
    whole = memoryview((ctypes.c_char * _MT_BYTES).from_address(addr)).cast("B").cast("I")
    return whole[::_STRIDE]


def _copy(view: memoryview | None) -> memoryview | None:
    """A copy of ``view``'s words (None for None), comparable with it by ``==``."""
    return None if view is None else memoryview(view.tobytes()).cast(view.format)


_PY_OFFSET = 16
"""Offset of CPython's ``RandomObject`` fields after ``PyObject_HEAD`` (64-bit builds):
``int index; uint32_t state[624]`` (Modules/_randommodule.c), 2,500 bytes."""

_PY_INST = random._inst  # type: ignore[attr-defined]
"""python's global generator: the object whose bound methods ``random.random``,
``random.seed``, ... are (bound once, at :mod:`random`'s import)."""

_py_seen: tuple = (None, None, None)
"""The sampled words of python's global generator's raw state (:func:`_view`; None: the
layout differs), a copy of them at the last full capture (:func:`_copy`) and that
capture (:func:`_python_state`)."""


def _python_state() -> tuple:
    """python's global stream as :func:`random.getstate` returns it.

    ``getstate`` builds a tuple of 625 ints (8 µs, up to 30 µs right after a
    training step); the stream rarely moves in a step. So, as for numpy,
    sampled words of the raw Mersenne-Twister state (read at the object's
    address past ``PyObject_HEAD``, :func:`_view`) are compared with a copy of
    them taken at the last full capture, together with ``gauss_next``, and that
    capture is returned again when both are unchanged (the tuple is immutable).
    The layout is checked once against ``getstate``: where it differs (another
    interpreter or build) every capture calls ``getstate``.
    """
    global _py_seen
    inst = _PY_INST
    view, raw, state = _py_seen
    if state is None:
        view = _python_view(inst)
    if view is not None and state is not None and inst.gauss_next is state[2]:
        if view == raw:
            return state
    state = inst.getstate()
    _py_seen = (view, _copy(view), state)
    return state


def _python_view(inst: random.Random) -> memoryview | None:
    """The sampled words of ``inst``'s raw state (:func:`_view`) if its layout matches
    its ``getstate``, else None."""
    try:
        b = ctypes.string_at(id(inst) + _PY_OFFSET, _MT_BYTES)
        words = inst.getstate()[1]
        ok = (len(words) == 625 and int.from_bytes(b[:4], "little", signed=True) == words[-1]
              and all(int.from_bytes(b[4 + 4 * i:8 + 4 * i], "little") == words[i]
                      for i in range(624)))
    except (TypeError, ValueError, OverflowError):
        return None
    return _view(id(inst) + _PY_OFFSET) if ok else None


def capture_rng_raw() -> tuple:
    """Every RNG stream's state as its own API returns it, unconverted: python's
    (:func:`random.getstate`), numpy's (``get_state(legacy=False)``), torch's CPU
    stream and each CUDA device's (a list, empty where CUDA is not initialised);
    :func:`rng_state` converts it when a checkpoint is written.

    Torch's CPU stream is a copy of its generator's state (:func:`_torch_state`: bytes,
    or ``get_state``'s tensor where the layout is not found); python's and numpy's are
    the last full capture while their stream has not moved (:func:`_python_state`,
    :func:`_numpy_state`), read-only. :meth:`jitbench.runtime.state.Boundary.take`, the
    per-step hot path, writes this out with each stream's check inline."""
    return _python_state(), _numpy_state(), _torch_state(), _cuda_states()


def _cuda_states() -> list:
    """Each CUDA device's generator state (a tensor each, in device order), or [] where
    CUDA is not initialised in this process."""
    # is_initialized implies is_available (1.5 µs warm, up to ~70 µs right after a
    # training step on a host without a GPU); its module flag, read first, spares the
    # call (5 µs from cold caches) in a process that never initialised CUDA
    if (_CUDA_FLAGGED is False or _cuda._initialized) and _cuda.is_initialized():
        # what get_rng_state_all returns (each device's generator state, in device order)
        # without its per-device lazy-init check and device parsing in Python
        gens = getattr(_cuda, "default_generators", ())
        return ([g.get_state() for g in gens] if len(gens) == _cuda.device_count()
                else _cuda.get_rng_state_all())
    return []


_cuda = torch.cuda
_CUDA_FLAGGED = hasattr(torch.cuda, "_initialized")
"""torch keeps ``torch.cuda._initialized`` (False until CUDA is initialised in this
process; ``is_initialized`` is it and not a bad fork). Without it, every capture calls
``is_initialized``."""

_CUDA_ON = True
"""Whether a capture reads the CUDA streams (calls :func:`_cuda_states`, which returns []
while CUDA is not initialised). False until CUDA is initialised in this process where
torch says when (:func:`_watch_cuda`), True for good elsewhere. The per-step capture
(:meth:`jitbench.runtime.state.Boundary.take`) reads this flag of its own module
instead of ``torch.cuda._initialized``: from cold caches, right after a CPU training
step, the lookup in ``torch.cuda``'s module dict cost 2.7 µs [0.7, 5.5] per step more
(``benchmarks/runtime-step-cost.txt``, run 11)."""


def _cuda_initialised() -> None:
    """Called by torch when CUDA is initialised in this process (:func:`_watch_cuda`)."""
    global _CUDA_ON
    _CUDA_ON = True


def _watch_cuda() -> None:
    """Have :data:`_CUDA_ON` follow CUDA's initialisation: torch runs the callables of
    ``torch.cuda._lazy_call`` once CUDA is initialised (``_lazy_init``, after the
    devices' generators exist), or at once where it is already; a forked child keeps
    the queued call, and in a bad fork :func:`_cuda_states` still returns []. Where
    torch has neither ``_lazy_call`` nor ``_initialized``, the flag stays True and every
    capture asks :func:`_cuda_states`."""
    global _CUDA_ON
    lazy = getattr(_cuda, "_lazy_call", None)
    if _CUDA_FLAGGED and callable(lazy):
        _CUDA_ON = False
        lazy(_cuda_initialised)


_watch_cuda()


_TORCH_GEN = torch.default_generator
"""torch's CPU generator (``torch.get_rng_state`` reads it)."""

_torch_get_state = _TORCH_GEN.get_state
"""torch's CPU stream as a new ``uint8`` tensor of 5,056 bytes: what
``torch.get_rng_state`` returns, without its Python wrapper."""

_ENGINE_BYTES = 8 + 4 + 4 + 4 + 624 * 4 + 4
"""``at::mt19937_data_pod`` (ATen/core/MT19937RNGEngine.h: ``uint64_t seed_; int left_;
bool seeded_; uint32_t next_; std::array<uint32_t, 624> state_``), padded to 8 bytes:
2,520. ``CPUGeneratorImpl`` (ATen/CPUGeneratorImpl.h) holds it as ``engine_``."""

_IMAGE_BYTES = _ENGINE_BYTES + 8 + 16
"""The engine and the two members after it, ``std::optional<float>
next_float_normal_sample_`` (8 bytes) and ``std::optional<double>
next_double_normal_sample_`` (16; a normal drawn singly caches its pair there): all
of a CPU generator's state that ``get_state`` reads, 2,544 bytes."""

_torch_engine: memoryview | None = None
"""The default CPU generator's state in place (:data:`_IMAGE_BYTES`, format ``B``) once
found and checked (:func:`_torch_state`); None: not yet, or every capture is
``get_state``'s tensor."""

_torch_looked = False
"""Whether :func:`_torch_state` looked for :data:`_torch_engine` in this process."""

_ENGINE_HEAD = struct.Struct("<QiBxxxI")
"""The engine's fields before its key: ``seed_``, ``left_``, ``seeded_`` (padded),
``next_``; the 624 key words follow at byte 20."""


def _torch_state() -> bytes | torch.Tensor:
    """torch's CPU stream: a copy of its generator's state (an image of
    :data:`_IMAGE_BYTES` bytes, converted to ``get_state``'s tensor by
    :func:`rng_state`) where the layout was found (:func:`_find_images`, the first call
    in a process), else ``get_state``'s tensor.

    ``get_state`` allocates a tensor and writes the legacy 5,056-byte form: 15-20 µs
    right after a CPU training step (cold caches), where the copy of the 2,544 bytes
    costs 10-14 µs (``benchmarks/runtime-step-cost.txt``); the conversion runs only
    when a checkpoint is written. Unlike ``get_state`` it does not take the generator's
    mutex: a draw on another thread during the copy (a script whose threads share
    the default generator, a run that no checkpoint can replay exactly anyway) can
    tear it, into a state that mixes two generations of the key (still a valid
    Mersenne Twister state) or, rarely, one that ``set_state`` would refuse, which
    :func:`rng_state` replaces by the stream's state when the checkpoint is written.
    """
    global _torch_engine, _torch_looked
    if not _torch_looked:
        _torch_looked = True
        _torch_engine = _find_images()
    if _torch_engine is not None:
        return bytes(_torch_engine)
    return _torch_get_state()


_LEGACY_HEAD = struct.Struct("<QiiQ")
"""``CPUGeneratorImplStateLegacy`` (ATen/CPUGeneratorImpl.cpp, the form ``get_state``
writes): ``uint64_t the_initial_seed; int left; int seeded; uint64_t next``, then
``uint64_t state[624]``."""

_FLAGS = struct.Struct("<i4x")
"""``int normal_is_valid`` and the legacy form's padding after it."""


def _image_state(image: bytes | memoryview) -> torch.Tensor:
    """``get_state``'s tensor (``CPUGeneratorImplState``, 5,056 bytes) of a CPU
    generator whose state is ``image`` (:func:`_torch_state`), written here as
    ``CPUGeneratorImpl::get_state`` (ATen/CPUGeneratorImpl.cpp) writes it: the seed,
    position and flags, the 624 key words widened to 64 bits, then ``double normal_x,
    normal_y, normal_rho; int normal_is_valid`` (a cached double normal as ``normal_y``,
    the others zero) and ``float next_float_normal_sample; bool
    is_next_float_normal_sample_valid``. The cached normals' bytes are copied as they
    are (a float NaN would not survive a trip through a Python float).
    :func:`_find_images` checks that this equals ``get_state`` before any image is
    taken.

    Raises:
        ValueError: ``image`` is not an image of this layout (its size, or a position
            ``left_`` outside 1..624, which ``set_state`` would refuse).
    """
    seed, left, seeded, nxt = (_ENGINE_HEAD.unpack_from(image) if len(image) == _IMAGE_BYTES
                               else (0, 0, 0, 0))
    if not 1 <= left <= 624:
        raise ValueError(f"not an image of torch's CPU generator ({len(image)} bytes, "
                         f"position {left})")
    key = np.frombuffer(image, dtype="<u4", count=624, offset=_ENGINE_HEAD.size).astype("<u8")
    at = _ENGINE_BYTES  # optional<float> (value, engaged), then optional<double> at +8
    f_set, d_set = image[at + 4] != 0, image[at + 16] != 0
    zero = bytes(8)
    out = b"".join((_LEGACY_HEAD.pack(seed, left, seeded, nxt), key.tobytes(),
                    zero, image[at + 8:at + 16] if d_set else zero, zero,
                    _FLAGS.pack(int(d_set)),
                    image[at:at + 4] if f_set else zero[:4], bytes((int(f_set), 0, 0, 0))))
    return torch.frombuffer(bytearray(out), dtype=torch.uint8)


def _readable(addr: int, size: int) -> bool:
    """Whether ``[addr, addr + size)`` lies in one readable mapping of this process
    (``/proc/self/maps``, Linux; False elsewhere or where it cannot be read)."""
    try:
        with open("/proc/self/maps", encoding="ascii") as f:
            for line in f:
                span, perms = line.split()[:2]
                lo, hi = (int(x, 16) for x in span.split("-"))
                if lo <= addr and addr + size <= hi:
                    return perms.startswith("r")
    except (OSError, ValueError):
        return False
    return False


def _engine_address(gen: torch.Generator) -> int | None:
    """Address of ``gen``'s ``at::mt19937_data_pod`` (:data:`_ENGINE_BYTES`), found, not
    assumed: the Python object holds ``at::Generator`` (one pointer to its
    ``CPUGeneratorImpl``) right after ``PyObject_HEAD`` (torch/csrc/Generator.h), and
    in the first 256 bytes of that object the engine is where ``get_state``'s seed,
    position and all 624 key words are (``CPUGeneratorImplStateLegacy``,
    ATen/CPUGeneratorImpl.cpp). Each span is checked mapped before it is read.
    None where any of it does not hold."""
    if sys.platform != "linux" or sys.maxsize < 2**32 or type(gen).__basicsize__ < 24:
        return None
    impl = ctypes.c_uint64.from_address(id(gen) + 16).value
    if impl % 8 or not _readable(impl, 256 + _ENGINE_HEAD.size):
        return None
    raw = gen.get_state().numpy().tobytes()
    if len(raw) < _LEGACY_HEAD.size + 624 * 8:
        return None
    seed, left, _, nxt = _LEGACY_HEAD.unpack_from(raw)
    key = np.frombuffer(raw, dtype="<u8", count=624, offset=_LEGACY_HEAD.size)
    for off in range(8, 256, 8):
        got = _ENGINE_HEAD.unpack(ctypes.string_at(impl + off, _ENGINE_HEAD.size))
        if (got[0], got[1], got[3]) != (seed, left, nxt):
            continue
        if not _readable(impl + off, _IMAGE_BYTES):
            return None
        words = np.frombuffer(ctypes.string_at(impl + off + _ENGINE_HEAD.size, 624 * 4),
                              dtype=np.uint32)
        return impl + off if np.array_equal(words, key) else None
    return None


def _with_float_normal(state: torch.Tensor, value: float) -> torch.Tensor:
    """``state`` (``get_state``'s form) with a cached float normal ``value`` set."""
    raw = bytearray(state.numpy().tobytes())
    struct.pack_into("<f?", raw, _LEGACY_HEAD.size + 624 * 8 + 3 * 8 + _FLAGS.size,
                     value, True)
    return torch.frombuffer(raw, dtype=torch.uint8)


def _find_images() -> memoryview | None:
    """The default CPU generator's state in place (:data:`_torch_engine`) if its images
    convert to exactly what ``get_state`` returns (:func:`_image_state`), else None.

    Checked on a private generator before the default one is read: after each of a
    draw, a normal drawn singly (its pair cached), the cached one consumed (the engine
    does not move), a float normal, a cached float normal set through ``set_state``
    (no draw caches one), a reseed and a twist (624 words), its image must convert to
    its ``get_state``; then the same for the default generator as it is now. The
    generators' memory is only read."""
    probe = torch.Generator()
    probe.manual_seed(0x5EED)
    found = [_engine_address(g) for g in (probe, _TORCH_GEN)]
    if None in found:
        return None
    probe_img, gen_img = (memoryview((ctypes.c_char * _IMAGE_BYTES).from_address(at)).cast("B")
                          for at in found)

    def converts(g: torch.Generator, img: memoryview) -> bool:
        try:
            return torch.equal(_image_state(bytes(img)), g.get_state())
        except ValueError:
            return False

    ops = (lambda: None,
           lambda: torch.rand(1, generator=probe),
           lambda: torch.randn(1, dtype=torch.float64, generator=probe),
           lambda: torch.randn(1, dtype=torch.float64, generator=probe),
           lambda: torch.randn(1, generator=probe),
           lambda: probe.set_state(_with_float_normal(probe.get_state(), 0.5)),
           lambda: probe.manual_seed(0x5EED),
           lambda: torch.randint(0, 2, (624,), generator=probe))
    for op in ops:
        op()
        if not converts(probe, probe_img):
            return None
    return gen_img if converts(_TORCH_GEN, gen_img) else None


def capture_rng() -> dict:
    """Every RNG stream of this process: python, numpy, torch CPU, CUDA (if initialised)."""
    return rng_state(capture_rng_raw())


def _torch_tensor(state: bytes | memoryview | torch.Tensor) -> torch.Tensor:
    """torch's CPU stream of a capture as ``get_state``'s tensor: an image (bytes; in a
    snapshot a memoryview of a bytearray, overwritten in place at each step end) converted
    (:func:`_image_state`); one torn so that ``set_state`` would refuse it (another
    thread drew during the copy, :func:`_torch_state`) gives way to the stream's
    state now, so that a checkpoint is never lost to it."""
    if type(state) is not bytes and type(state) is not memoryview:  # get_state's tensor
        return state
    try:
        return _image_state(state)
    except ValueError:
        return _torch_get_state()


def rng_state(raw: tuple) -> dict:
    """The checkpoint form (tensors and primitive values) of :func:`capture_rng_raw`'s output."""
    py, npst, torch_state, cuda = raw
    state = {
        "python": [py[0], list(py[1]), py[2]],
        "numpy": {"bit_generator": npst["bit_generator"],
                  "key": torch.from_numpy(npst["state"]["key"].astype(np.int64)),
                  "pos": int(npst["state"]["pos"]), "has_gauss": int(npst["has_gauss"]),
                  "gauss": float(npst["gauss"])},
        "torch": _torch_tensor(torch_state),
        "cuda": list(cuda),
    }
    return state


def restore_rng(state: dict) -> None:
    """Set every RNG stream from :func:`capture_rng`'s output (no draw in between)."""
    global _np_seen, _py_seen
    _np_seen = (None, None, None, None, None, None)
    _py_seen = (None, None, None)
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
