"""Execute every chapter notebook once and print its wall time (budget: 60 s each on 2 CPU cores).

Run: .venv/bin/python benchmarks/time_notebooks.py
"""

import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

BUDGET_S = 60.0
chapters = Path(__file__).resolve().parents[1] / "chapters"

print(f"{'notebook':32} {'seconds':>8}  budget {BUDGET_S:.0f} s")
for path in sorted(chapters.glob("*.ipynb")):
    notebook = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(notebook, timeout=600, resources={"metadata": {"path": str(chapters)}}).execute()
    seconds = time.perf_counter() - start
    print(f"{path.name:32} {seconds:8.1f}  {'ok' if seconds < BUDGET_S else 'OVER'}")
