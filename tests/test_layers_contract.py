"""The layers of mhsa, kept by import-linter: a lower layer never imports a higher one.

The contract is ``[tool.importlinter]`` in pyproject.toml, top to bottom: mhsa.course,
mhsa.models, mhsa.layers, mhsa.attention, mhsa.interop, mhsa.core. import-linter reads every
import, those inside functions too.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from paths import ROOT


def test_lower_layers_never_import_higher_ones():
    lint_imports = Path(sys.executable).with_name("lint-imports")
    if not lint_imports.exists():
        pytest.fail(f"import-linter is not installed next to {sys.executable}; `make install` "
                    "installs it")
    # this checkout's mhsa, whichever one the environment has installed
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    result = subprocess.run([str(lint_imports), "--no-cache", "--no-logo"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
