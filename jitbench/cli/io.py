"""``jitbench io``: the disk's bandwidth against the JIT save and restore of a model's state.

The measurements are :mod:`jitbench.harness.iobench`'s; torch and the harness are
imported inside the command, so ``jitbench io --help`` does not load them.
"""

from __future__ import annotations

import csv
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer

from jitbench.cli import console
from jitbench.cli.console import cell
from jitbench.cli.options import csv_list
from jitbench.cli.outfile import check_dir, check_output, csv_header_is, json_has_keys
from jitbench.errors import InputError, unknown

CSV_COLUMNS = ("what", "mb", "seconds", "mb_s", "ratio", "repeats")
"""Header of the ``--csv`` table (an existing file with another header is never replaced)."""
META_KEYS = ("size", "repeats", "replicas", "block_bytes")
"""Keys every ``.meta.json`` that ``io`` writes has (another file there is never replaced)."""


def _meta_path(out_csv: Path) -> Path:
    """The machine record written beside the ``--csv`` table: ``<csv>.meta.json``."""
    return Path(f"{out_csv}.meta.json")


def parse_replicas(text: str) -> tuple[int, ...]:
    """``"1,2,4"`` -> ``(1, 2, 4)``.

    Raises:
        InputError: not comma-separated integers >= 1.
    """
    try:
        out = tuple(int(x) for x in csv_list(text))
    except ValueError:
        out = ()
    if not out or min(out) < 1 or max(out) > MAX_REPLICAS:
        raise InputError(f"--replicas: expected comma-separated integers in [1, "
                         f"{MAX_REPLICAS}], got {text!r}")
    return out


MAX_REPLICAS = 1024
"""Most writers of a measured split save. Each writes its share as files of its own,
so the count bounds the files one measurement makes (a million writers made about
780k files of a few bytes each: a file-creation benchmark, not a checkpoint's); a
data-parallel job of 16k GPUs with 8-way model parallelism has 2,048 replicas, of
which a split save at this size would use far fewer writers than 1,024."""


def _digits(x: float | None) -> int:
    """Decimals that give ``x`` three significant figures (0 from 100 up, at most 6): a
    small state's 2.4 MB is not shown as 2, nor its 0.0031 s save as 0.003."""
    if x is None or x != x or x >= 100 or x <= 0:
        return 0
    return min(6, 2 - math.floor(math.log10(x)))


def io(
    ckpt_dir: Annotated[Path | None, typer.Option(
        "--ckpt-dir", help="Directory measured: must be absent or empty (an existing file "
                           "is never touched); the benchmark's own files are removed after "
                           "each measurement. Default: a new temporary directory on "
                           "--run-dir's filesystem.")] = None,
    run_dir: Annotated[Path, typer.Option(
        "--run-dir", help="Where the default --ckpt-dir is made (its filesystem is measured).")]
    = Path("."),
    size: Annotated[str, typer.Option(help="GPT size whose state (model + AdamW) is saved.")]
    = "gpt2",
    repeats: Annotated[int, typer.Option(help="Repeats of every measurement (median).")] = 3,
    replicas: Annotated[str, typer.Option(
        help="Comma-separated writer counts R of the split save (each writes 1/R).")] = "1,2,4",
    out_csv: Annotated[Path | None, typer.Option(
        "--csv", help="Also write the rows as CSV here (with a .meta.json of the machine).")]
    = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print rows and machine as one JSON object.")] = False,
) -> None:
    """Disk bandwidth vs JIT save and restore throughput, with ratios.

    Measures the disk's sequential write+fsync and read bandwidth on the checkpoint
    directory, then jitbench's JIT save, restore, the periodic baselines and the split
    save of R writers, each with its ratio to the disk. Every output path is checked
    first; --csv never replaces a file that is not an earlier io table (or .meta.json)."""
    from jitbench.workloads.gpt import SIZES

    if size not in SIZES:
        raise InputError(unknown("gpt size", size, SIZES))
    if repeats < 1:
        raise InputError(f"--repeats must be >= 1, got {repeats}")
    writers = parse_replicas(replicas)
    if ckpt_dir is not None and ckpt_dir.exists() and not ckpt_dir.is_dir():
        raise InputError(f"--ckpt-dir {ckpt_dir} is not a directory")
    if ckpt_dir is not None and ckpt_dir.is_dir() and any(ckpt_dir.iterdir()):
        raise InputError(f"--ckpt-dir {ckpt_dir} is not empty (give an absent or empty "
                         "directory: the benchmark writes and removes its own files there)")
    if ckpt_dir is None and not run_dir.is_dir():
        raise InputError(f"--run-dir {run_dir} "
                         + ("is not a directory" if run_dir.exists() else "does not exist"))
    # every output is checked before the state is built and measured (minutes): a path
    # that cannot be written, or a file recorded by something else, is refused now
    check_dir(ckpt_dir if ckpt_dir is not None else run_dir,
              "--ckpt-dir" if ckpt_dir is not None else "--run-dir")
    if out_csv is not None:
        check_output(out_csv, "--csv", csv_header_is(CSV_COLUMNS), "jitbench io table", "io")
        check_output(_meta_path(out_csv), "--csv", json_has_keys(META_KEYS),
                     "jitbench io machine record (.meta.json)", "io")

    import torch

    from jitbench.harness import iobench

    own = ckpt_dir is None
    d = Path(tempfile.mkdtemp(prefix="jitbench-io-", dir=run_dir)) if own else ckpt_dir
    before = iobench.machine()
    t0 = time.time()
    try:
        console.line(f"building the {size} state ...")
        state = iobench.make_state(size)
        rows = iobench.run_io_bench(d, state, repeats, writers, progress=console.line)
        fs = iobench.filesystem(d)
        if own:  # the measured directory is removed below: name where it was, not it
            fs = {**fs, "path": f"a temporary directory in {os.path.realpath(run_dir)}, "
                                "removed"}
    finally:
        if own:
            import shutil

            shutil.rmtree(d, ignore_errors=True)
    after = iobench.machine()
    meta = {"size": size, "repeats": repeats, "replicas": list(writers),
            "block_bytes": iobench.BLOCK_BYTES, "cache": "posix_fadvise DONTNEED before reads",
            "filesystem": fs, "cpus": before.get("cpus"), "ram_gib": before.get("ram_gib"),
            "loadavg_before": before.get("loadavg"), "loadavg_after": after.get("loadavg"),
            "torch": torch.__version__, "python": sys.version.split()[0],
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0)),
            "wall_s": round(time.time() - t0, 1)}
    dicts = iobench.rows_dicts(rows)
    if out_csv is not None:
        try:
            with open(out_csv, "w", newline="") as fh:
                w = csv.DictWriter(fh, CSV_COLUMNS)
                w.writeheader()
                for r in dicts:
                    w.writerow({**r, "repeats": " ".join(f"{x:.6g}" for x in r["repeats"])})
            _meta_path(out_csv).write_text(json.dumps(meta, indent=1) + "\n")
        except OSError as exc:  # changed since the check: still one line, exit 2
            raise InputError(f"--csv: cannot write {exc.filename or out_csv}: "
                             f"{exc.strerror or exc}") from None
    if as_json:
        print(json.dumps({"machine": meta, "rows": dicts}))
        return
    from rich.table import Table

    table = Table(title=f"checkpoint I/O, {size} state, median of {repeats}")
    for col in ("what", "MB", "seconds", "MB/s", "ratio to disk"):
        table.add_column(col, justify="left" if col == "what" else "right")
    for r in rows:
        table.add_row(r.what, cell(r.mb, _digits(r.mb)), cell(r.seconds, _digits(r.seconds)),
                      cell(r.mb_s, _digits(r.mb_s)), cell(r.ratio, _digits(r.ratio)))
    console.out().print(table)
    la, lb = meta["loadavg_before"], meta["loadavg_after"]
    console.out().print(
        f"{'' if own else 'directory '}{fs['path']} ({fs['type']} on {fs['device']}, mount {fs['mount']}); "
        f"{meta['cpus']} CPUs, {meta['ram_gib']} GiB RAM, torch {meta['torch']}; "
        f"load average before {la[0]:.2f} {la[1]:.2f} {la[2]:.2f}, "
        f"after {lb[0]:.2f} {lb[1]:.2f} {lb[2]:.2f}; reads after posix_fadvise DONTNEED")
