"""nox sessions: tests (the CI suite), lint (ruff and the layer contracts), stress (hundreds
of fault campaigns), startup (start-up time of the light CLI commands), figures (measure,
then rewrite README's figure blocks from benchmarks/)."""

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True


@nox.session(venv_backend="none")
def tests(session: nox.Session) -> None:
    """The default test suite (unit + distributed on gloo), as CI runs it."""
    session.run("python", "-m", "pytest", *session.posargs)


@nox.session(venv_backend="none")
def lint(session: nox.Session) -> None:
    """ruff over the package, tests and benchmarks; the layer contracts of .importlinter."""
    session.run("ruff", "check", "jitbench", "tests", "benchmarks", "noxfile.py")
    session.run("lint-imports")


@nox.session(venv_backend="none")
def heavy(session: nox.Session) -> None:
    """Tables of multi-process runs kept out of the CI suite for time (the fault x point
    x strategy matrix, the fault-kind matrix of in-process recovery, every cell of the
    JIT, in-process, ``inmem``, ``launch`` and transparent-JIT tables, the sweeps, the
    campaigns and the overhead launches; README's "Development")."""
    session.run("python", "-m", "pytest", "-m", "heavy", *session.posargs)


@nox.session(venv_backend="none")
def stress(session: nox.Session) -> None:
    """Random fault campaigns (``JITBENCH_STRESS_CAMPAIGNS``, default 200), appended as one
    chunk to ``benchmarks/stress-cpu.txt`` (violations included); prints the record's
    totals. A chunk at a time reaches 1,000 campaigns on a shared machine."""
    import os
    import random
    import tempfile

    seed = os.environ.get("JITBENCH_STRESS_SEED") or str(random.randrange(2**32))
    log = os.path.join(tempfile.mkdtemp(prefix="jitbench-stress-"), "stress.jsonl")
    env = {"JITBENCH_STRESS_SEED": seed, "JITBENCH_STRESS_LOG": log}
    session.run("python", "-m", "pytest", "-m", "stress", "-p", "no:randomly", "-s",
                *session.posargs, env=env, success_codes=[0, 1])
    if os.path.exists(log):
        session.run("python", "benchmarks/stress_chunks.py", "append", log, "--seed", seed)


@nox.session(venv_backend="none")
def startup(session: nox.Session) -> None:
    """Start-up time of jitbench --help, faults and gate --help against import torch."""
    session.run("python", "benchmarks/cli_startup.py", *session.posargs)


@nox.session(venv_backend="none")
def figures(session: nox.Session) -> None:
    """Re-measure README's main job (3 repeats: benchmarks/main-job-cpu.json), then rewrite
    every figure block of README.md from the committed files under benchmarks/.
    ``nox -s figures -- suite`` also times README's test command (25-30 minutes on 2
    cores: benchmarks/suite-cpu.json); the other tables have their own sweeps
    (benchmarks/README.md)."""
    session.run("python", "benchmarks/main_job.py", "benchmarks/main-job-cpu.json",
                "--repeats", "3")
    if "suite" in session.posargs:
        session.run("python", "benchmarks/suite_time.py", "benchmarks/suite-cpu.json", "--",
                    "python", "-m", "pytest", success_codes=[0, 1])  # failures are recorded
    session.run("python", "benchmarks/readme_figures.py")


@nox.session(venv_backend="none")
def io(session: nox.Session) -> None:
    """The disk's bandwidth against the JIT save and restore of the gpt2 state (``jitbench
    io``, 3 repeats, split writers 1, 2, 4): the table to benchmarks/io-cpu.txt's format,
    the rows to benchmarks/io-cpu.csv (+ .meta.json: machine, filesystem, load)."""
    session.run("jitbench", "io", "--repeats", "3", "--replicas", "1,2,4",
                "--csv", "benchmarks/io-cpu.csv", *session.posargs)
