"""The GitHub workflow files, checked offline by two linters installed from packages (the dev
extra): check-jsonschema against GitHub's workflow schema (bundled in the package) and zizmor's
security audit (actions pinned to a commit, least permissions, no credentials left behind)."""

import subprocess
import sys
from pathlib import Path

import pytest

from paths import ROOT

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def tool(name: str) -> str:
    path = Path(sys.executable).with_name(name)
    if not path.exists():
        pytest.fail(f"{name} is not installed next to {sys.executable}; `make install` installs it")
    return str(path)


def test_there_are_workflows_to_check():
    assert {path.name for path in WORKFLOWS} >= {"tests.yml", "book.yml"}


def test_workflows_follow_githubs_schema():
    command = [tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows",
               *map(str, WORKFLOWS)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_zizmor_finds_nothing_offline():
    command = [tool("zizmor"), "--offline", "--no-progress", str(ROOT / ".github" / "workflows")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
