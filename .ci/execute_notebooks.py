"""Re-execute chapter notebooks in place, top to bottom, and store their outputs.

Usage: python .ci/execute_notebooks.py [chapters/NN_name.ipynb ...]   (default: all)
Run after editing a chapter; nbval then compares these stored outputs strictly.
Per-cell timing metadata is dropped so that re-running changes nothing but real outputs.
"""

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

chapters = Path(__file__).resolve().parents[1] / "chapters"
paths = [Path(p).resolve() for p in sys.argv[1:]] or sorted(chapters.glob("*.ipynb"))
for path in paths:
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)
    nbformat.write(notebook, path)
    print(f"executed {path.name}")
