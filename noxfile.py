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
    """Tables of multi-process runs kept out of the CI suite for time (the fault-kind
    matrix of in-process recovery, every example of ``launch`` under every fault, every
    ``inmem`` cell)."""
    session.run("python", "-m", "pytest", "-m", "heavy", *session.posargs)


@nox.session(venv_backend="none")
def stress(session: nox.Session) -> None:
    """Hundreds of random fault campaigns; prints campaigns and violations."""
    session.run("python", "-m", "pytest", "-m", "stress", "-p", "no:randomly", "-s",
                *session.posargs)


@nox.session(venv_backend="none")
def startup(session: nox.Session) -> None:
    """Start-up time of jitbench --help, faults and gate --help against import torch."""
    session.run("python", "benchmarks/cli_startup.py", *session.posargs)


@nox.session(venv_backend="none")
def figures(session: nox.Session) -> None:
    """Re-measure README's main job (3 repeats: benchmarks/main-job-cpu.json), then rewrite
    every figure block of README.md from the committed files under benchmarks/.
    ``nox -s figures -- suite`` also times README's test command (about 22 minutes on 2
    cores: benchmarks/suite-cpu.json); the other tables have their own sweeps
    (benchmarks/README.md)."""
    session.run("python", "benchmarks/main_job.py", "benchmarks/main-job-cpu.json",
                "--repeats", "3")
    if "suite" in session.posargs:
        session.run("python", "benchmarks/suite_time.py", "benchmarks/suite-cpu.json", "--",
                    "python", "-m", "pytest", success_codes=[0, 1])  # failures are recorded
    session.run("python", "benchmarks/readme_figures.py")
