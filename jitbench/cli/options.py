"""Options shared by several commands, declared once, and the parsers of their values.

Also :func:`option_groups`, which lets a command take groups of options as
dataclasses (``run`` takes its fault, training, job, detection and output
options that way) while the command line stays flat.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
import typing
from collections.abc import Callable
from typing import Annotated, Any

import typer

from jitbench.errors import SpecError, unknown
from jitbench.runtime import strategies

__all__ = ["Backend", "BatchSize", "JsonRows", "JsonSummary", "Mtbf",
           "OverwriteOut", "Strategies", "Strategy", "Workload", "check_sizes", "csv_list",
           "option_groups", "parse_duration_s", "parse_nnodes"]

Workload = Annotated[str, typer.Option("--workload", "-w", help="gpt or resnet.")]
Strategy = Annotated[str, typer.Option(
    help=f"{strategies.usage()} (periodic:auto needs --mtbf).")]
Strategies = Annotated[str, typer.Option(
    help=f"Comma-separated strategies ({strategies.usage()}).")]
Backend = Annotated[str, typer.Option(
    help="Process-group backend: gloo (CPU) or nccl (one CUDA device per rank).")]
BatchSize = Annotated[int, typer.Option(help="Micro-batch size per rank.")]
Mtbf = Annotated[str | None, typer.Option(
    "--mtbf", help="The job's mean time between failures for periodic:auto: seconds, or with a "
                   "unit (90s, 10m, 2h, 1d). Whole job, not per GPU.")]
Nproc = Annotated[int, typer.Option("--nproc", help="Ranks per node.")]
Nnodes = Annotated[str, typer.Option(
    help="Nodes: N, or torch elastic's MIN:MAX range (each node runs this command; needs "
         "--rdzv-endpoint and a shared --run-dir). The job trains at MAX nodes; an agent "
         "started when MAX nodes already hold places is refused (exit 2).")]
RdzvEndpoint = Annotated[str | None, typer.Option(
    help="HOST:PORT of the c10d rendezvous for several nodes.")]
MaxRestarts = Annotated[int, typer.Option(help="Elastic agent's restart budget.")]
OverwriteOut = Annotated[bool, typer.Option(help="Replace a non-empty --out.")]
JsonRows = Annotated[bool, typer.Option("--json", help="Print the rows as one JSON array.")]
JsonSummary = Annotated[bool, typer.Option("--json", help="Print the summary as one JSON object.")]

_UNITS_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration_s(text: str | None) -> float | None:
    """``"90"`` or ``"90s"`` -> 90.0; ``"10m"``, ``"2h"``, ``"1.5d"`` likewise (seconds).

    Raises:
        SpecError: not a positive duration.
    """
    if text is None:
        return None
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[+-]?\d+)?)\s*([smhd]?)\s*", text.lower())
    if not m or float(m[1]) <= 0:
        raise SpecError(f"--mtbf must be a positive duration in seconds (or with a unit: "
                        f"90s, 10m, 2h, 1d), got {text!r}")
    return float(m[1]) * _UNITS_S[m[2] or "s"]


def parse_nnodes(text: str | int) -> tuple[int, int]:
    """``--nnodes``: ``"2"`` -> ``(2, 2)``, ``"2:3"`` -> ``(2, 3)`` (torch elastic's
    ``MIN:MAX``, torchrun's own syntax).

    Raises:
        SpecError: not ``N`` or ``MIN:MAX`` with ``1 <= MIN <= MAX`` (one line).
    """
    m = re.fullmatch(r"\s*(\d+)\s*(?::\s*(\d+)\s*)?", str(text))
    if not m:
        raise SpecError(f"--nnodes must be N or MIN:MAX (whole numbers, e.g. 2 or 2:3), "
                        f"got {text!r}")
    lo = int(m[1])
    hi = int(m[2]) if m[2] is not None else lo
    if lo < 1:
        raise SpecError(f"--nnodes: the minimum must be >= 1, got {text!r}")
    if lo > hi:
        raise SpecError(f"--nnodes MIN:MAX needs MIN <= MAX, got {text!r}")
    return lo, hi


def csv_list(text: str, option: str = "") -> list[str]:
    """``"a, b, c"`` -> ``["a", "b", "c"]``; ``""`` or ``" , "`` -> ``[]`` (the
    caller names an empty list).

    Raises:
        SpecError: an empty item (``"jit,,none"``, a trailing comma): a value typed
            wrong, not one to drop silently; ``option`` names the flag in the line.
    """
    items = [t.strip() for t in text.split(",")]
    if not any(items):
        return []
    if "" in items:
        where = f"{option}: " if option else ""
        raise SpecError(f"{where}empty item in {text!r} (comma-separated, no empty entries)")
    return items


def check_sizes(sizes: dict[str, str]) -> None:
    """Refuse an unknown workload or model size in a ``{workload: size}`` map.

    Raises:
        SpecError: one line naming the known ones.
    """
    from jitbench.workloads import WORKLOADS

    for workload, size in sizes.items():
        if workload not in WORKLOADS:
            raise SpecError(f"unknown workload {workload!r} in --sizes; one of "
                            f"{', '.join(WORKLOADS)}")
        known = _model_sizes(workload)
        if size not in known:
            raise SpecError(unknown(f"{workload} size", size, known))


def _model_sizes(workload: str) -> dict:
    if workload == "gpt":
        from jitbench.workloads.gpt import SIZES
    else:
        from jitbench.workloads.resnet import SIZES
    return SIZES


def option_groups(command: Callable[..., Any]) -> Callable[..., Any]:
    """Let a typer command take option groups.

    Every parameter of ``command`` annotated with a dataclass whose fields are
    typer options (``Annotated[T, typer.Option(...)] = default``) becomes
    those options on the command line, in field order; the command receives
    one instance of the dataclass per group. Other parameters pass through.
    """
    hints = typing.get_type_hints(command, include_extras=True)
    params: list[inspect.Parameter] = []
    groups: dict[str, tuple[type, list[str]]] = {}
    for name, param in inspect.signature(command).parameters.items():
        kind = hints.get(name, param.annotation)
        if not (isinstance(kind, type) and dataclasses.is_dataclass(kind)):
            params.append(param.replace(annotation=kind, kind=inspect.Parameter.KEYWORD_ONLY))
            continue
        field_hints = typing.get_type_hints(kind, include_extras=True)
        fields = dataclasses.fields(kind)
        params += [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default,
                                     annotation=field_hints[f.name]) for f in fields]
        groups[name] = (kind, [f.name for f in fields])
    seen = [p.name for p in params]
    dup = sorted({n for n in seen if seen.count(n) > 1})
    assert not dup, f"option groups of {command.__name__} repeat {dup}"

    @functools.wraps(command)
    def flat(**kwargs: Any) -> Any:
        for name, (kind, names) in groups.items():
            kwargs[name] = kind(**{n: kwargs.pop(n) for n in names})
        return command(**kwargs)

    flat.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    flat.__annotations__ = {p.name: p.annotation for p in params}
    return flat
