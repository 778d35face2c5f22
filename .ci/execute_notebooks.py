"""Re-execute chapter notebooks in place, top to bottom, and store their outputs.

Usage: python .ci/execute_notebooks.py [chapters/NN_name.ipynb ...]   (default: all)
Run after editing a chapter; nbval then compares these stored outputs strictly.
Per-cell timing metadata is dropped so that re-running changes nothing but real outputs,
and a stream the kernel flushed in pieces is stored as one output: the book would
otherwise break a printed line where one piece ends.
"""

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def merge_adjacent_streams(cell) -> None:
    """Join consecutive stream outputs of one name (stdout, stderr) into one, in place."""
    merged = []
    for output in cell.get("outputs", []):
        last = merged[-1] if merged else None
        if (output.output_type == "stream" and last is not None
                and last.output_type == "stream" and last.name == output.name):
            last.text += output.text
        else:
            merged.append(output)
    if "outputs" in cell:
        cell.outputs = merged


def main(args: list[str]) -> None:
    chapters = Path(__file__).resolve().parents[1] / "chapters"
    paths = [Path(p).resolve() for p in args] or sorted(chapters.glob("*.ipynb"))
    for path in paths:
        notebook = nbformat.read(path, as_version=4)
        NotebookClient(notebook, timeout=600, kernel_name="python3",
                       resources={"metadata": {"path": str(path.parent)}}).execute()
        for cell in notebook.cells:
            cell.metadata.pop("execution", None)
            merge_adjacent_streams(cell)
        nbformat.write(notebook, path)
        print(f"executed {path.name}")


if __name__ == "__main__":
    main(sys.argv[1:])
