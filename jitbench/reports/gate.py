"""Regression gate: compare a results table with a stored baseline.

``jitbench gate --baseline FILE RESULTS`` decides on three kinds of evidence.

1. **Comparability** (else :class:`Incomparable`, exit 6). These keys must match:

   - ``results_version``: the schema of the table;
   - per configuration (``workload``, ``strategy``, ``fault``): the run spec
     (``spec_json``: model size, steps, batch, world size, seed, fault rank and
     step, backend, detection settings, deterministic reduction, ...), field by
     field. A field that only one side has (a field added to the spec since the
     baseline was recorded) is skipped with a note; every field both have must
     be equal. The results and the baseline must hold the same configurations;
   - ``machine_torch``: the torch version (it decides checkpoint formats, DCP
     and kernels);
   - ``machine_peer_*``: the versions of the peer systems (``torchft``,
     ``nvidia-resiliency-ext``): equal where both tables have the column; a
     column only one side has refuses the comparison when a peer strategy
     (a registry entry with ``requires``) is among the rows, else is a note.

   Host name, CPU count, platform and Python version may differ (a CI runner is
   not the machine the baseline was recorded on); the gate prints a note, and
   timing tolerances are generous for that reason. ``strict_machine`` also
   requires ``machine_host`` and ``machine_cpus`` to match.

2. **Invariants, exactly** (exit 4 when broken), on every row of the results:
   the run completed, ``state_equal`` is true, and ``replay_ok`` is true (the
   restore replayed exactly the steps since the newest committed checkpoint,
   and under ``jit`` at most one step per failure). Each only where the run
   or its baseline promised it: a row whose ``bitwise_promised`` is false (a
   launched script's own recovery, ``own``; a peer that trains on with fewer
   replicas) has its ``state_equal`` reported, not judged, and one whose
   ``replay_promised`` is false (``own``) its replay, unless a baseline row of the
   same configuration promised it (a run must not pass by withdrawing a promise,
   as a launched script's hooks do when they turn inexact); an empty cell
   promises (the built-in strategies), as in :func:`jitbench.records.verdict`,
   and so does a table without the column, except in a row of :data:`OWN` (a
   baseline recorded before the columns existed: a script's own recovery never
   promised either, so an ``own`` sweep stays unjudged against it).

3. **Timings, as ratios with a noise-aware tolerance** (exit 5 on a
   regression), per configuration and metric (:data:`TIMINGS`): with ``b`` the
   baseline's repeats and ``r`` the results' repeats, the results regress when

       median(r) > median(b) * (1 + tolerance) * (1 + noise)   and
       median(r) - median(b) > floor

   where ``noise = max(spread(b), spread(r))`` and ``spread(x) = (max(x) -
   min(x)) / median(x)`` over repeats (0 for one run), and ``floor`` is
   ``floor_s`` seconds (``floor_s x world_size`` for GPU-second metrics): a
   millisecond save that doubles on a loaded machine is noise, not a
   regression. A slower median inside that band is reported as "within noise".
   A timing the baseline measured but the results did not (all empty) is a
   regression too: a lost measurement never passes.

A table without the columns these checks read (:data:`INVARIANT_COLUMNS`,
:data:`TIMINGS`) is incomparable, never a pass. A timing cell that is neither
empty (a run without a failure has no recovery to time) nor a finite number of
seconds >= 0 (``-5``, ``abc``, ``inf``) makes the table unusable: refused as bad
input (:class:`jitbench.errors.InputError`, exit 2), never compared or dropped.

One line per regressed metric and per broken invariant is printed.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from jitbench.errors import IncomparableError, InputError
from jitbench.records import check_cells, empty_cell, is_bool

OWN = "own"
"""The strategy of a launched script's own recovery (``jitbench launch``, ``sweep
--script``): it promises neither the fault-free state nor a replay bound."""
TIMINGS = ("detect_s", "save_s", "restart_s", "restore_s", "recovery_s", "wasted_gpu_s",
           "step_s")
"""Timing metrics compared (lower is better)."""
KEY = ("workload", "strategy", "fault")
INVARIANT_COLUMNS = ("completed", "state_equal", "replay_ok", "replayed_steps",
                     "expected_replayed_steps")
"""Columns the exact checks read (a table without them is refused, never passed)."""
MACHINE_KEYS = ("machine_torch",)
STRICT_MACHINE_KEYS = ("machine_host", "machine_cpus")
INFO_MACHINE_KEYS = ("machine_host", "machine_cpus", "machine_platform", "machine_python")


Incomparable = IncomparableError
"""The old name of :class:`jitbench.errors.IncomparableError` (exit status 6)."""


@dataclass
class Check:
    """One comparison."""

    config: str
    """``workload/strategy/fault``."""
    metric: str
    status: str
    """``ok``, ``within noise``, ``regression`` or ``violation``."""
    value: float | None = None
    baseline: float | None = None
    ratio: float | None = None
    allowed_ratio: float | None = None
    detail: str = ""

    def line(self) -> str:
        if self.status == "violation":
            return f"VIOLATION  {self.config} {self.metric}: {self.detail}"
        if self.value is None:
            return f"{'REGRESSION':<12} {self.config} {self.metric}: {self.detail}"
        tag = {"regression": "REGRESSION", "within noise": "within noise", "ok": "ok"}[self.status]
        unit = "GPU-s" if self.metric.endswith("gpu_s") else "s"
        return (f"{tag:<12} {self.config} {self.metric}: {self.value:.3f} {unit} vs baseline "
                f"{self.baseline:.3f} {unit} (x{self.ratio:.2f}; allowed x{self.allowed_ratio:.2f}"
                f"{', ' + self.detail if self.detail else ''})")


@dataclass
class Verdict:
    """All checks of one gate run."""

    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> list[Check]:
        return [c for c in self.checks if c.status == "regression"]

    @property
    def violations(self) -> list[Check]:
        return [c for c in self.checks if c.status == "violation"]

    def lines(self, verbose: bool = False) -> list[str]:
        """Violations and regressions (one line each), "within noise" lines, notes, summary."""
        out = [c.line() for c in self.violations] + [c.line() for c in self.regressions]
        out += [c.line() for c in self.checks if c.status == "within noise"]
        if verbose:
            out += [c.line() for c in self.checks if c.status == "ok"]
        out += [f"note: {n}" for n in self.notes]
        n_t = sum(1 for c in self.checks if c.status != "violation" and c.metric in TIMINGS)
        verdict = ("FAIL" if self.violations or self.regressions else "PASS")
        out.append(f"gate: {verdict}: {len(self.violations)} invariant violations, "
                   f"{len(self.regressions)} timing regressions, "
                   f"{sum(1 for c in self.checks if c.status == 'within noise')} within noise, "
                   f"{n_t} timings compared")
        return out


def _config(row) -> str:
    return "/".join(str(row[k]) for k in KEY)


def _col(t, name: str):
    if name not in t.columns:
        raise Incomparable(f"the table lacks the column {name!r} (not a jitbench results table?)")
    return t[name]


def _flatten(x, prefix: str = "") -> dict:
    if isinstance(x, dict):
        out: dict = {}
        for k, v in x.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(x, list) and x and all(isinstance(v, dict) for v in x):
        out = {}
        for i, v in enumerate(x):
            out.update(_flatten(v, f"{prefix}.{i}"))
        return out
    return {prefix: x}


def _specs(t, key, name: str = "results") -> list[dict] | None:
    """The distinct flattened specs of one configuration (None without ``spec_json``).

    Raises:
        InputError: a ``spec_json`` cell of the configuration is not a JSON object
            (one line naming ``name``, the configuration and the cell; exit 2).
    """
    import json

    if "spec_json" not in t.columns:
        return None
    sel = t
    for col, val in zip(KEY, key, strict=True):
        sel = sel[sel[col] == val]
    out = []
    for cell in dict.fromkeys(sel["spec_json"].tolist()):
        try:
            spec = json.loads(cell) if isinstance(cell, str) else None
        except ValueError:
            spec = None
        if not isinstance(spec, dict):
            shown = ("empty" if empty_cell(cell) else repr(cell) if len(str(cell)) <= 40
                     else repr(str(cell)[:40] + "..."))
            raise InputError(f"{name}: {'/'.join(map(str, key))}: spec_json is {shown}, "
                             "not a run spec (a JSON object; a corrupt table: nothing "
                             "compared)")
        out.append(_flatten(spec))
    return out


def _spread(xs: list[float]) -> float:
    med = statistics.median(xs)
    return (max(xs) - min(xs)) / med if len(xs) > 1 and med > 0 else 0.0


def _truthy(v) -> bool:
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, str):
        return v.strip().lower() == "true"
    return v is True or v == 1


def _false(v) -> bool:
    """``v`` is an explicit false (:func:`jitbench.records.is_bool`, as
    :func:`jitbench.records.verdict` reads a promise); an empty cell promises."""
    return is_bool(v, False)


def _figure(v) -> str | None:
    """A recorded figure as a violation line shows it (``3``, ``0.25``), or None when
    the cell is empty (not measured: the line then says nothing of it)."""
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None if v is None or (isinstance(v, str) and not v.strip()) else str(v)
    if x != x:
        return None
    return str(int(x)) if x.is_integer() else f"{x:g}"


def _replay_detail(r) -> str:
    """What a ``replay_ok`` violation line says: the steps replayed and expected, each
    only where it was measured (never ``nan``), and JIT's one-step bound."""
    replayed, expected = _figure(r.get("replayed_steps")), _figure(r.get("expected_replayed_steps"))
    parts = [f"replayed {replayed}" if replayed else "replayed steps not measured"]
    if expected:
        parts.append(f"expected {expected}")
    return ", ".join(parts) + (" (jit: at most 1 per failure)" if r["strategy"] == "jit" else "")


def _version(x) -> str:
    """A recorded peer version as text; a missing one (None in parquet, NaN or an empty
    cell in CSV) is ``absent`` whichever format it was read from."""
    if x is None or (isinstance(x, float) and x != x) or str(x).strip() in ("", "None", "nan"):
        return "absent"
    return str(x)


def _check_peer_versions(baseline, results, v) -> None:
    """Refuse results whose peer-system versions differ from the baseline's (see the
    module docstring, step 1).

    Raises:
        Incomparable: a version differs, or is recorded on one side only while a
            peer strategy is compared.
    """
    from jitbench.runtime.strategies import REGISTRY

    peers = {name for name, e in REGISTRY.items() if e.requires}
    used = {str(x).split(":")[0] for t in (baseline, results) if "strategy" in t.columns
            for x in t["strategy"]}
    cols = sorted({c for t in (baseline, results) for c in t.columns
                   if str(c).startswith("machine_peer_")})
    for c in cols:
        if c in baseline.columns and c in results.columns:
            bk, rk = set(map(_version, baseline[c])), set(map(_version, results[c]))
            if bk != rk:
                raise Incomparable(f"{c} {sorted(rk)} vs baseline {sorted(bk)}: peer versions "
                                   "differ")
        elif used & peers:
            side = "results" if c in results.columns else "baseline"
            raise Incomparable(f"{c} is recorded only in the {side} while peer strategies "
                               f"({', '.join(sorted(used & peers))}) are compared")
        else:
            v.notes.append(f"{c} recorded on one side only (no peer strategy compared)")


def compare(baseline, results, tolerance: float = 0.5, floor_s: float = 1.0,
            strict_machine: bool = False,
            names: tuple[str, str] = ("baseline", "results")) -> Verdict:
    """Compare two results tables (pandas DataFrames, one row per run).

    Args:
        baseline: the stored baseline (several repeats per configuration give its noise).
        results: the new results.
        tolerance: allowed growth of a median beyond the noise band (0.5: +50%).
        floor_s: absolute slack (s) below which a slower timing is within noise.
        strict_machine: also require the same host name and CPU count.
        names: how messages name the baseline and the results (their files).

    Raises:
        Incomparable: a comparability key differs, or a table lacks a column the
            checks read (see the module docstring; exit status 6).
        InputError: a cell cannot be what its column records, e.g. a timing that
            is not empty and not a finite number >= 0
            (:func:`jitbench.records.check_cells`; exit status 2).
    """
    import pandas as pd

    v = Verdict()
    for name, t in (("baseline", baseline), ("results", results)):
        if not len(t):
            raise Incomparable(f"the {name} table is empty")
        for k in (*KEY, "spec_hash", "results_version", *MACHINE_KEYS, *INVARIANT_COLUMNS,
                  *TIMINGS):
            _col(t, k)
    for name, t in zip(names, (baseline, results), strict=True):
        check_cells(t, name)
    bv, rv = set(_col(baseline, "results_version")), set(_col(results, "results_version"))
    if bv != rv or len(bv) != 1:
        raise Incomparable(f"results_version {sorted(rv)} vs baseline {sorted(bv)}")
    for k in MACHINE_KEYS + (STRICT_MACHINE_KEYS if strict_machine else ()):
        bk, rk = set(map(str, _col(baseline, k))), set(map(str, _col(results, k)))
        if bk != rk:
            raise Incomparable(f"{k} {sorted(rk)} vs baseline {sorted(bk)}")
    _check_peer_versions(baseline, results, v)
    for k in INFO_MACHINE_KEYS:
        if k in baseline.columns and k in results.columns:
            bk, rk = set(map(str, baseline[k])), set(map(str, results[k]))
            if bk != rk:
                v.notes.append(f"{k} differs ({', '.join(sorted(rk))} vs baseline "
                               f"{', '.join(sorted(bk))}); timings compared with tolerance "
                               f"{tolerance:.0%} beyond the noise band")
    bh = baseline.groupby(list(KEY))["spec_hash"].agg(lambda s: sorted(set(s)))
    rh = results.groupby(list(KEY))["spec_hash"].agg(lambda s: sorted(set(s)))
    missing = sorted("/".join(map(str, k)) for k in set(rh.index) - set(bh.index))
    if missing:
        raise Incomparable(f"configurations not in the baseline: {', '.join(missing)}")
    lacking = sorted("/".join(map(str, k)) for k in set(bh.index) - set(rh.index))
    if lacking:
        raise Incomparable(f"baseline configurations missing from the results: "
                           f"{', '.join(lacking)}")
    one_sided: set[str] = set()
    for k in rh.index:
        name = "/".join(map(str, k))
        specs_b = _specs(baseline, k, names[0])
        specs_r = _specs(results, k, names[1])
        if specs_b is None or specs_r is None:  # no spec_json column: fall back to the hash
            if rh[k] != bh[k]:
                raise Incomparable(f"{name}: spec_hash {rh[k]} vs baseline {bh[k]} (the run "
                                   "spec changed: record a new baseline)")
            continue
        for sr in specs_r:
            for sb in specs_b:
                diff = [f for f in sorted(sr.keys() & sb.keys()) if sr[f] != sb[f]]
                if diff:
                    raise Incomparable(
                        f"{name}: the run spec differs from the baseline's: "
                        + ", ".join(f"{f} {sr[f]!r} vs {sb[f]!r}" for f in diff[:4])
                        + " (record a new baseline)")
                one_sided |= sr.keys() ^ sb.keys()
    if one_sided:
        v.notes.append(f"spec fields on one side only (skipped): {', '.join(sorted(one_sided))}")

    # invariants, exactly, where the run or the baseline promised them (module
    # docstring, step 2): a run that withdrew a promise its baseline configuration
    # kept (a launched script's hooks that turned inexact) is judged all the same
    base_promised = {what: {_config(b) for _, b in baseline.iterrows()
                            if (not _false(b.get(col)) if col in baseline.columns
                                else str(b.get("strategy")) != OWN)}
                     for what, col in (("state_equal", "bitwise_promised"),
                                       ("replayed_steps", "replay_promised"))}
    unjudged: dict[str, set[str]] = {}
    for _, r in results.iterrows():
        cfg = _config(r)
        if "repeat" in results.columns and pd.notna(r.get("repeat")):
            cfg += f" (repeat {int(r['repeat'])})"  # one line per run, not N identical ones
        if not _truthy(r["completed"]):
            v.checks.append(Check(cfg, "completed", "violation", detail="the run did not complete"))
            continue
        bitwise = (not _false(r.get("bitwise_promised"))
                   or _config(r) in base_promised["state_equal"])
        replay = (not _false(r.get("replay_promised"))
                  or _config(r) in base_promised["replayed_steps"])
        for what, promised in (("state_equal", bitwise), ("replayed_steps", replay)):
            if not promised:
                unjudged.setdefault(what, set()).add(_config(r))
        if bitwise and not _truthy(r["state_equal"]):
            diff = _figure(r.get("max_abs_diff"))
            v.checks.append(Check(cfg, "state_equal", "violation",
                                  detail=(("false" + (f" (max_abs_diff {diff})" if diff else ""))
                                          if pd.notna(r["state_equal"]) else "not recorded")))
        if "unfired_faults" in results.columns and pd.notna(r["unfired_faults"]) \
                and r["unfired_faults"] > 0:
            v.checks.append(Check(cfg, "unfired_faults", "violation",
                                  detail=f"{int(r['unfired_faults'])} planned fault(s) never "
                                         "fired: nothing was measured for them"))
        if replay and not _truthy(r["replay_ok"]):
            v.checks.append(Check(cfg, "replayed_steps", "violation",
                                  detail=_replay_detail(r)))

    for what, cfgs in sorted(unjudged.items()):
        v.notes.append(f"{what} reported, not judged (neither the run nor its baseline "
                       f"promised it): {', '.join(sorted(cfgs))}")

    # timings, as ratios with a noise-aware tolerance
    for k in rh.index:
        sel_b = (baseline[list(KEY)] == pd.Series(k, index=list(KEY))).all(axis=1)
        sel_r = (results[list(KEY)] == pd.Series(k, index=list(KEY))).all(axis=1)
        cfg = "/".join(map(str, k))
        sizes = (pd.to_numeric(results[sel_r]["world_size"], errors="coerce").dropna()
                 if "world_size" in results else ())
        world = int(sizes.iloc[0]) if len(sizes) else 1  # unrecorded: the floor of one rank
        for m in TIMINGS:
            b = [float(x) for x in pd.to_numeric(baseline[sel_b][m], errors="coerce").dropna()]
            r = [float(x) for x in pd.to_numeric(results[sel_r][m], errors="coerce").dropna()]
            if b and not r:  # a measurement that got lost is not a pass
                v.checks.append(Check(cfg, m, "regression", baseline=statistics.median(b),
                                      detail=f"not measured in the results ({len(b)} baseline "
                                             "runs measured it)"))
                continue
            if not b or not r:
                continue
            mb, mr = statistics.median(b), statistics.median(r)
            noise = max(_spread(b), _spread(r))
            allowed = (1 + tolerance) * (1 + noise)
            floor = floor_s * (world if m.endswith("gpu_s") else 1)
            ratio = mr / mb if mb > 0 else (1.0 if mr <= 0 else float("inf"))
            if mr > mb * allowed and mr - mb > floor:
                status = "regression"
            elif mr > mb:
                status = "within noise"
            else:
                status = "ok"
            v.checks.append(Check(cfg, m, status, mr, mb, ratio, allowed,
                                  f"noise {noise:.0%}, {len(b)} baseline / {len(r)} new runs"))
    return v
