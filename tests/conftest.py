"""Shared test settings: seeded hypothesis, tiny sizes."""

import os

import torch
from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, max_examples=40)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
