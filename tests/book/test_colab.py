"""Each chapter runs alone in a bare runtime, installing mhsa with its own first cell, as in Colab.

One virtual environment per test session holds only what a Colab runtime brings that the
chapters rely on: python, torch, numpy, matplotlib and ipykernel. For each chapter, everything
installed since is removed again, the chapter is copied alone into an empty folder and run
there top to bottom, with ``MHSA_INSTALL_SOURCE`` pointing at this checkout's package.
Its first cell must install mhsa (with the extras it names) and every later cell must run. The
outputs are not compared: nbval does that in the full environment. mhsa is built from this
checkout once per session, into a wheel, as pip would build it from the repository.

torch comes from the index ``make install`` used (``TORCH_INDEX``, see the Makefile), at the
version installed here, so pip finds it in its cache.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient

from paths import ROOT

NOTEBOOKS = sorted((ROOT / "chapters").glob("*.ipynb"))
KERNEL = "mhsa-bare"
PIP = ["-m", "pip", "--disable-pip-version-check"]

pytestmark = pytest.mark.colab


def clean_environment() -> dict:
    """This process's environment without what would let the kernel see our packages."""
    hidden = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "JUPYTER_PATH", "PYTHONSTARTUP"}
    return {name: value for name, value in os.environ.items() if name not in hidden}


def run(*command, env=None):
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False,
                            env=env or clean_environment())
    assert result.returncode == 0, f"{command}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def installed(python: Path) -> set[str]:
    listing = json.loads(run(str(python), *PIP, "list", "--format=json"))
    return {package["name"].lower() for package in listing}


@pytest.fixture(scope="session")
def bare_runtime(tmp_path_factory):
    """(python of the bare environment, the packages it starts with, kernel spec manager)."""
    folder = tmp_path_factory.mktemp("bare")
    venv = folder / "venv"
    run(sys.executable, "-m", "venv", str(venv))
    python = venv / "bin" / "python"
    index = os.environ.get("TORCH_INDEX")
    torch_version = torch.__version__.split("+")[0]  # 2.13.0+cpu -> 2.13.0
    # --no-compile: Python compiles only the modules a chapter imports, when it imports them
    run(str(python), *PIP, "install", "-q", "--no-compile", f"torch=={torch_version}",
        *(["--index-url", index] if index else []))
    run(str(python), *PIP, "install", "-q", "--no-compile", "numpy", "matplotlib", "ipykernel")
    run(str(python), "-m", "ipykernel", "install", "--prefix", str(folder / "jupyter"),
        "--name", KERNEL)
    kernels = KernelSpecManager(kernel_dirs=[str(folder / "jupyter/share/jupyter/kernels")])
    return python, installed(python), kernels


@pytest.fixture(scope="session")
def package_source(bare_runtime, tmp_path_factory):
    """mhsa built from this checkout once, as a wheel's file:// URL (pip builds a checkout as
    it would build the repository's git URL; one build keeps each chapter's install short)."""
    python, _, _ = bare_runtime
    source, wheels = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("wheels")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "mhsa", source / "mhsa", ignore=shutil.ignore_patterns("__pycache__"))
    run(str(python), *PIP, "wheel", "-q", "--no-deps", "--wheel-dir", str(wheels), str(source))
    (wheel,) = wheels.glob("mhsa-*.whl")
    return wheel.as_uri()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_chapter_runs_alone_in_a_bare_runtime(path, bare_runtime, package_source, tmp_path):
    python, bare_packages, kernels = bare_runtime
    added = sorted(installed(python) - bare_packages)  # what an earlier chapter installed
    if added:
        run(str(python), *PIP, "uninstall", "-q", "-y", *added)
    assert "mhsa" not in installed(python)
    shutil.copy(path, tmp_path / path.name)  # the chapter alone, as Colab opens it
    notebook = nbformat.read(tmp_path / path.name, as_version=4)
    env = clean_environment() | {"MHSA_INSTALL_SOURCE": package_source}
    manager = AsyncKernelManager(kernel_name=KERNEL, kernel_spec_manager=kernels)
    client = NotebookClient(notebook, km=manager, timeout=600,
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute(env=env)  # raises CellExecutionError at a failing cell
    assert "mhsa" in installed(python), "the first cell did not install mhsa"
