"""Shared test settings (seeded hypothesis, tiny sizes); fixtures over tests/references.py."""

import os

import pytest
import torch
from hypothesis import settings

import references

settings.register_profile("ci", derandomize=True, deadline=None, max_examples=40)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
# Two threads at most; one per process when pytest-xdist runs several (`make check`), so that
# the workers do not fight over the cores.
torch.set_num_threads(1 if "PYTEST_XDIST_WORKER" in os.environ
                      else max(1, min(2, torch.get_num_threads())))


@pytest.fixture
def kv_caches_made_by(monkeypatch):
    """``kv_caches_made_by(mhsa.models.causal_lm)``: the list of every KVCache that module
    makes during the test (see :func:`references.record_kv_caches`)."""
    return lambda module: references.record_kv_caches(monkeypatch, module)
