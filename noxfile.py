"""nox sessions: tests (the CI suite), lint (ruff and the layer contracts), stress (hundreds
of fault campaigns), startup (start-up time of the light CLI commands)."""

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
