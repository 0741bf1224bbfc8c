"""The stress record (``benchmarks/stress-cpu.txt``) in resumable chunks.

``nox -s stress`` runs random fault campaigns (``tests/dist/test_campaigns.py``,
marker ``stress``) and writes one JSON line per campaign to its log. This script
appends such a log to the record as one chunk, headed by one line::

    # chunk 3: 100 campaigns, 0 violations, commit abc1234, seed 42, 2026-12-01, median 12.6 s/campaign, strategies jit 40 ...

and prints the totals over every chunk, so 1,000 campaigns can be reached a few
hundred at a time on a shared machine, each chunk at the commit it ran on.

After a fix to a metric or to the checker, ``recheck`` judges a chunk's runs again
from the run directories they left (``jitbench.harness.campaign.recheck``: the
summary derived anew from the events, checkpoints and final states, with this
checkout's code) and, given ``--chunk``, appends one line to the record::

    # recheck of chunk 11 at commit def5678, 2026-12-03: 124 campaigns, 0 violations (1 at run time)

The chunk's own header keeps what it found when it ran.

Usage::

    python benchmarks/stress_chunks.py append LOG.jsonl --seed S [--commit C] [--note TEXT] [--record FILE]
    python benchmarks/stress_chunks.py recheck LOG.jsonl [--chunk N] [--note TEXT] [--record FILE]
    python benchmarks/stress_chunks.py total [--record FILE]

Exit status: 0; 1 when the record holds a violation (``total``) or a rechecked
campaign has one (``recheck``); 2 for a missing or unreadable log, record or run
directory, or a log whose number of campaigns is not the chunk's (one line).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

from provenance import git_commit

RECORD = Path(__file__).with_name("stress-cpu.txt")
CHUNK = re.compile(r"^# chunk (\d+): (\d+) campaigns, (\d+) violations")
RECHECK = re.compile(r"^# recheck of chunk (\d+) at commit ([\w+]*), [\d-]+: (\d+) campaigns, "
                     r"(\d+) violations")


def _rel(record: Path) -> str:
    """``record``'s path in the checkout (its own changes do not make a commit dirty)."""
    try:
        return str(record.resolve().relative_to(Path(__file__).resolve().parent.parent))
    except ValueError:
        return str(record)


def chunks(record: Path) -> list[tuple[int, int, int]]:
    """``(chunk number, campaigns, violations)`` of every chunk header in ``record``."""
    return [(int(m[1]), int(m[2]), int(m[3]))
            for m in map(CHUNK.match, record.read_text().splitlines()) if m]


def _rows(log: Path, need: dict[str, type | tuple[type, ...]]) -> list[dict]:
    """The campaigns of a stress log, one JSON object per line, each with the keys of
    ``need`` holding values of their types.

    Raises:
        OSError: the log cannot be read.
        ValueError: it holds no campaign, or a line is not a campaign (file and line named).
    """
    rows = []
    for n, text in enumerate(log.read_text().splitlines(), 1):
        if not text.strip():
            continue
        try:
            r = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"{log}:{n}: not JSON ({exc})") from None
        if not isinstance(r, dict) or not all(isinstance(r.get(k), t) for k, t in need.items()):
            raise ValueError(f"{log}:{n}: not a campaign of the stress test (needs "
                             f"{', '.join(need)})")
        rows.append(r)
    if not rows:
        raise ValueError(f"{log} holds no campaign")
    return rows


def append(log: Path, record: Path, seed: str, note: str = "", commit: str | None = None) -> str:
    """Append the campaigns of ``log`` (JSON lines of the stress test) to ``record`` as
    the next chunk, run at ``commit`` (default: the checkout's HEAD); returns its
    header line.

    Raises:
        OSError: ``log`` or ``record`` cannot be read or written.
        ValueError: ``log`` holds no campaign.
    """
    rows = _rows(log, {"campaign": str, "violations": list, "wall_s": (int, float)})
    bad = sum(1 for r in rows if r["violations"])
    n = max((c for c, _, _ in chunks(record)), default=0) + 1 if record.exists() else 1
    strategies = Counter(r["campaign"].split(": ")[0] for r in rows)
    kinds = Counter(f.split("@")[0] for r in rows for f in r["campaign"].split(": ", 1)[1]
                    .split(", "))
    head = (f"# chunk {n}: {len(rows)} campaigns, {bad} violations, commit "
            f"{commit or git_commit(ignore=(_rel(record),))}, "
            f"seed {seed}, {time.strftime('%Y-%m-%d')}, median "
            f"{statistics.median(r['wall_s'] for r in rows):.1f} s/campaign, strategies "
            + ", ".join(f"{k} {v}" for k, v in strategies.most_common())
            + "; faults " + ", ".join(f"{k} {v}" for k, v in kinds.most_common())
            + (f". {note}" if note else ""))
    lines = [head] + [
        f"[{i:4d}] {'ok ' if not r['violations'] else 'BAD'} {r['wall_s']:6.1f}s "
        f"base{r.get('base', 0)} {r['campaign']}"
        + "".join(f"\n        {v}" for v in r["violations"]) for i, r in enumerate(rows, 1)]
    with open(record, "a") as fh:
        fh.write("\n".join(lines) + "\n")
    return head


def rechecks(record: Path) -> list[tuple[int, str, int, int]]:
    """``(chunk number, commit, campaigns, violations)`` of every recheck line in ``record``."""
    return [(int(m[1]), m[2], int(m[3]), int(m[4]))
            for m in map(RECHECK.match, record.read_text().splitlines()) if m]


def recheck(log: Path, record: Path, chunk: int | None, note: str = "",
            commit: str | None = None) -> tuple[str, int]:
    """Judge every campaign of ``log`` again from its run directory with this
    checkout's metrics and checker (:func:`jitbench.harness.campaign.recheck`);
    prints one line per campaign whose verdict changed. With ``chunk``, appends the
    recheck line to ``record`` (the log must hold that chunk's number of campaigns).

    Returns:
        ``(the recheck line, violations now)``.

    Raises:
        OSError: the log, the record or a run directory cannot be read.
        ValueError: the log holds no campaign, or not the chunk's number of them,
            or ``chunk`` is not in the record.
    """
    try:
        from jitbench.harness import campaign
    except ImportError as exc:
        raise OSError(f"recheck needs jitbench installed (pip install -e .): {exc}") from exc

    rows = _rows(log, {"campaign": str, "violations": list, "run_dir": str})
    if chunk is not None:
        sizes = {c: n for c, n, _ in chunks(record)}
        if chunk not in sizes:
            raise ValueError(f"{record} holds no chunk {chunk}")
        if sizes[chunk] != len(rows):
            raise ValueError(f"{log} holds {len(rows)} campaigns, chunk {chunk} {sizes[chunk]}")
    then = now = 0
    for i, r in enumerate(rows, 1):
        violations, _ = campaign.recheck(r["run_dir"])
        # what only the run could see (a process or a port left behind) stands
        violations += [v for v in r["violations"] if v.startswith(("orphans:", "ports:"))]
        then += bool(r["violations"])
        now += bool(violations)
        if bool(violations) != bool(r["violations"]) or violations and \
                violations != r["violations"]:
            print(f"[{i:4d}] {r['campaign']}: at run time {r['violations'] or 'ok'}, "
                  f"now {violations or 'ok'}")
    line = (f"# recheck of chunk {chunk if chunk is not None else '?'} at commit "
            f"{commit or git_commit(ignore=(_rel(record),))}, {time.strftime('%Y-%m-%d')}: "
            f"{len(rows)} campaigns, "
            f"{now} violations ({then} at run time)" + (f". {note}" if note else ""))
    if chunk is not None:
        with open(record, "a") as fh:
            fh.write(line + "\n")
    return line, now


def total(record: Path) -> tuple[int, int, int]:
    """``(chunks, campaigns, violations)`` over the record."""
    cs = chunks(record)
    return len(cs), sum(c for _, c, _ in cs), sum(v for _, _, v in cs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("append", help="append a stress log as the next chunk")
    a.add_argument("log", type=Path)
    a.add_argument("--seed", required=True)
    a.add_argument("--note", default="")
    a.add_argument("--commit", default=None, help="the commit it ran at (default: HEAD)")
    a.add_argument("--record", type=Path, default=RECORD)
    r = sub.add_parser("recheck", help="judge a chunk's runs again with this checkout")
    r.add_argument("log", type=Path)
    r.add_argument("--chunk", type=int, default=None,
                   help="the chunk the log is: append the recheck line to the record")
    r.add_argument("--note", default="")
    r.add_argument("--record", type=Path, default=RECORD)
    t = sub.add_parser("total", help="campaigns and violations over every chunk")
    t.add_argument("--record", type=Path, default=RECORD)
    args = ap.parse_args(argv)
    try:
        if args.cmd == "recheck":
            line, now = recheck(args.log, args.record, args.chunk, args.note)
            print(line)
            return 1 if now else 0
        if args.cmd == "append":
            print(append(args.log, args.record, args.seed, args.note, args.commit))
        n, campaigns, bad = total(args.record)
        again = rechecks(args.record)
    except (OSError, ValueError, KeyError, IndexError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"stress record {args.record}: {campaigns} campaigns in {n} chunks, {bad} violations")
    for c, commit, k, v in again:
        print(f"  chunk {c} rechecked at {commit}: {k} campaigns, {v} violations")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
