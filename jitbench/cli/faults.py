"""``jitbench faults``: every fault kind with its family, injection point and parameters."""

from __future__ import annotations

import json

from jitbench.cli import console
from jitbench.cli.options import JsonRows


def faults(as_json: JsonRows = False) -> None:
    """List every fault with a one-line description."""
    from jitbench.faults import catalog

    rows = catalog()

    if as_json:
        print(json.dumps(rows))
        return
    from rich.table import Table

    t = Table(title="faults (jitbench run --fault NAME [--fault-param KEY=VALUE])")
    for col in ("name", "family", "fires", "summary", "parameters"):
        # names and parameters are typed back on the command line: never cut
        t.add_column(col, no_wrap=col in ("name", "family", "fires"), overflow="fold")
    for r in rows:
        t.add_row(r["name"], r["family"], r["point"], r["summary"],
                  " ".join(f"{k}={v['default']}" for k, v in r["params"].items()))
    console.out().print(t)
