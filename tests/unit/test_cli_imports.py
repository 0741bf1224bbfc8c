"""The CLI's light commands never import torch; the fault listing matches the fault classes."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import entry_points

import pytest

_PROBE = """
import json, sys
from jitbench.cli import app
try:
    rc = app(args=sys.argv[1:], prog_name="jitbench", standalone_mode=False)
except SystemExit as exc:
    rc = exc.code
heavy = sorted(m for m in ("torch", "torchvision", "jitbench.harness.spec") if m in sys.modules)
print(json.dumps({"rc": rc or 0, "heavy": heavy}), file=sys.stderr)
"""


@pytest.mark.parametrize("args", [
    ["--help"],
    ["faults"],
    ["faults", "--json"],
    ["gate", "--help"],
    ["report", "--help"],
    ["run", "--help"],
    ["launch", "--help"],
    ["sweep", "--help"],
    ["overhead", "--help"],
    ["validate", "--help"],
    ["model", "--help"],
    ["model", "--gpus", "8,1024", "--trials", "2", "--horizon-hours", "10", "--json"],
    ["model", "--gpus", "8", "--trials", "2", "--horizon-hours", "10", "--out", "{tmp}"],
], ids=" ".join)
def test_light_commands_do_not_import_torch(args, tmp_path):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    p = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stderr.strip().splitlines()[-1])
    assert got == {"rc": 0, "heavy": []}, p.stderr
    assert p.stdout.strip()


def test_console_script_is_the_package_main():
    from jitbench import cli

    (ep,) = entry_points(group="console_scripts", name="jitbench")
    assert ep.value == "jitbench.cli:main"
    assert ep.load() is cli.main
