"""Shared test settings (seeded hypothesis, tiny sizes) and the fixtures over tests/references.py."""

import os

import pytest
import torch
from hypothesis import settings

import references

settings.register_profile("ci", derandomize=True, deadline=None, max_examples=40)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
torch.set_num_threads(max(1, min(2, torch.get_num_threads())))


@pytest.fixture
def kv_caches_made_by(monkeypatch):
    """``kv_caches_made_by(mhsa.models.causal_lm)``: the list of every KVCache that module
    makes during the test (see :func:`references.record_kv_caches`)."""
    return lambda module: references.record_kv_caches(monkeypatch, module)
