"""Output files of the benchmark commands, checked before any work is done.

``validate --csv`` and ``io --csv`` (and the ``.meta.json`` beside it) write a file the
user names. Before a command measures or reads anything, :func:`check_output` makes
sure that the file can be written (its directory exists and takes a new file) and that
writing it loses nothing recorded: an existing, non-empty file is replaced only when it
is that command's own earlier output (``is_own``: its header is the table's header),
as ``report --out`` replaces only a jitbench report. :func:`check_dir` does the same
for a directory a command will create or write into.

Only the standard library is imported (the CLI's light commands start without torch).
"""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from jitbench.errors import InputError

__all__ = ["check_dir", "check_output", "csv_header_is", "json_has_keys"]


def _probe(directory: Path) -> str | None:
    """Why a new file cannot be created in ``directory`` (one phrase), or None: a
    temporary file is created there and removed again (nothing else is touched)."""
    try:
        fd, name = tempfile.mkstemp(prefix=".jitbench-probe-", dir=directory)
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        if exc.errno == errno.ENOENT and directory.is_dir():
            # a directory that exists yet answers "no such file" to a create (procfs,
            # sysfs): the errno alone would read as if the directory were missing
            return f"{directory} takes no new file (the system answered: {why})"
        return why
    os.close(fd)
    os.unlink(name)
    return None


def _nearest(path: Path) -> Path:
    """``path``'s nearest ancestor (or itself) that exists."""
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def csv_header_is(columns: tuple[str, ...] | list[str]) -> Callable[[Path], bool]:
    """A test for :func:`check_output`: the file's first line is exactly ``columns``
    joined by commas (a CSV this command wrote with pandas or :mod:`csv`)."""
    want = ",".join(columns)

    def test(path: Path) -> bool:
        try:
            with open(path, "rb") as fh:
                first = fh.readline(65536)
        except OSError:
            return False
        return first.decode("utf-8", "replace").rstrip("\r\n") == want

    return test


def json_has_keys(keys: tuple[str, ...]) -> Callable[[Path], bool]:
    """A test for :func:`check_output`: the file is a JSON object with every key of
    ``keys`` (a record this command wrote)."""
    import json

    def test(path: Path) -> bool:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return False
        return isinstance(data, dict) and all(k in data for k in keys)

    return test


def check_output(path: Path, flag: str, is_own: Callable[[Path], bool], what: str,
                 command: str) -> None:
    """Refuse, before any work, an output file that cannot be written or must not be
    replaced.

    Args:
        path: the file the command will write.
        flag: the option that named it (``--csv``), for the message.
        is_own: whether an existing file is this command's own earlier output, which
            may be replaced (:func:`csv_header_is`, :func:`json_has_keys`).
        what: what the command writes there, for the message (``jitbench validate
            table``).
        command: the command's name (``validate``), for the message.

    Raises:
        InputError: one line, exit status 2: ``path`` is a directory; its directory
            does not exist, is not a directory or takes no new file (``{flag}: cannot
            write PATH: ...``); or it exists, is not empty and is not ``is_own``
            (``... exists and is not a ...; give a new file name``). An empty file
            holds nothing recorded and may be replaced.
    """
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{flag}: cannot write {path}: it is a directory; give the file "
                         "to write")
    parent = p.absolute().parent
    if not parent.exists():
        raise InputError(f"{flag}: cannot write {path}: its directory {parent} does not "
                         "exist")
    if not parent.is_dir():
        raise InputError(f"{flag}: cannot write {path}: {parent} is not a directory")
    if p.exists():
        if p.stat().st_size and not is_own(p):
            raise InputError(f"{flag}: {path} exists and is not a {what}; give a new file "
                             f"name ({command} never replaces other files)")
        try:
            with open(p, "ab"):  # append mode: nothing in it changes
                pass
        except OSError as exc:
            raise InputError(f"{flag}: cannot write {path}: "
                             f"{exc.strerror or type(exc).__name__}") from None
        return
    why = _probe(parent)
    if why is not None:
        raise InputError(f"{flag}: cannot write {path}: {why}")


def check_dir(path: Path, flag: str) -> None:
    """Refuse, before any work, a directory that cannot be written into or created.

    Args:
        path: a directory the command writes into, or creates (with its parents).
        flag: the option that named it (``--ckpt-dir``), for the message.

    Raises:
        InputError: one line, exit status 2 (``{flag}: cannot write PATH: ...``):
            ``path`` or its nearest existing ancestor is not a directory, or takes
            no new file.
    """
    anc = _nearest(Path(path))
    if not anc.is_dir():
        raise InputError(f"{flag}: cannot write {path}: {anc} is not a directory")
    why = _probe(anc)
    if why is not None:
        raise InputError(f"{flag}: cannot write {path}: {why}")
