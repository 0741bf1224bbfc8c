"""nox sessions: tests (the CI suite), lint, stress (hundreds of fault campaigns)."""

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True


@nox.session(venv_backend="none")
def tests(session: nox.Session) -> None:
    """The default test suite (unit + distributed on gloo), as CI runs it."""
    session.run("python", "-m", "pytest", *session.posargs)


@nox.session(venv_backend="none")
def lint(session: nox.Session) -> None:
    """ruff over the package and tests."""
    session.run("ruff", "check", "jitbench", "tests", "noxfile.py")


@nox.session(venv_backend="none")
def stress(session: nox.Session) -> None:
    """Hundreds of random fault campaigns; prints campaigns and violations."""
    session.run("python", "-m", "pytest", "-m", "stress", "-p", "no:randomly", "-s",
                *session.posargs)
