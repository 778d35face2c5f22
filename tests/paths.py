"""Where the repository's files are, for the tests that read them (tests/book/ mostly)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the repository root: chapters/, mhsa/, tests/
