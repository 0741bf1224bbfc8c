"""What a sweep's results table does not record, written beside it: load, date, machine.

``benchmarks/peers-sweep.sh`` and ``benchmarks/validation-sweep.sh`` call it before and
after their sweep; the committed ``*.meta.json`` sidecar is what
``benchmarks/readme_figures.py`` reads for the load (and, for the validation table, the
date and machine).

    python benchmarks/sweep_meta.py start START.json        # load before, date
    python benchmarks/sweep_meta.py end START.json FILE     # writes FILE.meta.json

``START.json`` lies outside the sweep directory (the sweep refuses a non-empty one)
and is removed by ``end``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


def _torch() -> str | None:
    try:
        return version("torch")
    except PackageNotFoundError:
        return None


def main(argv: list[str] | None = None) -> int:
    """``start START`` or ``end START FILE``; exit status 2 on bad arguments or I/O."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 2 or argv[0] not in ("start", "end") or (argv[0] == "end") != (len(argv) == 3):
        print("usage: sweep_meta.py start START.json | end START.json FILE", file=sys.stderr)
        return 2
    start = meta = Path(argv[1])
    load = [round(x, 2) for x in os.getloadavg()]
    try:
        if argv[0] == "start":
            doc = {"date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
                   "t0": time.time(), "load_before": load}
        else:
            doc = json.loads(start.read_text())
            meta = Path(argv[2] + ".meta.json")
            doc.update(file=Path(argv[2]).name, load_after=load,
                       sweep_wall_s=round(time.time() - doc.pop("t0"), 1),
                       machine={"cpus": os.cpu_count(), "torch": _torch()},
                       provenance="written by benchmarks/sweep_meta.py around the sweep")
        meta.write_text(json.dumps(doc, indent=2) + "\n")
        if meta != start:
            start.unlink()
    except (OSError, ValueError, KeyError) as exc:
        print(f"sweep_meta: cannot update {meta}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
