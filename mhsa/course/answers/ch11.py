"""Answers to the exercises of chapter 11, positions, windows and an induction head. Try them first."""

import torch

from mhsa.core.masks import sliding_window_mask


def _mistral_reach() -> float:
    """11.1: positions back from which an input reaches the last output, 32 layers, window 4096."""
    layers, window = 32, 4096
    small = sliding_window_mask(16, window=4).int()  # the rule, traced on a small case first
    reach = torch.eye(16, dtype=torch.int)
    for _ in range(3):
        reach = ((small @ reach) > 0).int()
    assert 15 - int(reach[-1].nonzero().min()) == 3 * (4 - 1)  # internal invariant of the trace
    return float(layers * (window - 1))


def _mistral_windowed_cache_mib() -> float:
    """11.2: MiB of Mistral 7B's windowed float16 cache: 32 layers, 8 kv heads of 128, 4096 positions."""
    bytes_per_token = 2 * 32 * 8 * 128 * torch.empty(0, dtype=torch.float16).element_size()
    return bytes_per_token * 4096 / 2**20


def _induction_target() -> float:
    """11.3: in "x a b c d x a b", the position an induction head at the last "b" attends to."""
    symbols = ["x", "a", "b", "c", "d", "x", "a", "b"]
    current = len(symbols) - 1
    earlier = max(i for i in range(current) if symbols[i] == symbols[current])
    return float(earlier + 1)


ANSWERS = {
    "11.1": _mistral_reach,
    "11.2": _mistral_windowed_cache_mib,
    "11.3": _induction_target,
}

# common wrong answers, with the hint the self-check prints for each
HINTS = {
    "11.1": [(32 * 4096, "32 * 4096 is the Mistral paper's figure: it counts 4096 keys before the "
                         "query. Here a window of 4096 is the query and the 4095 keys before it: how "
                         "far back does one layer reach?")],
}
