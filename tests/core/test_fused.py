"""The fast path: which torch kernel runs, its peak memory, torch.compile.

Speed is checked by benchmarks/bench_fast.py, never here.
"""

import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

import mhsa
from mhsa import KVCache
from mhsa.course.measure import (
    peak_memory_supported,
)

from references import small_mha
from tolerances import worst_case

# float32. An output entry of MultiHeadAttention(16, 4) ends a chain of sums: projection over
# 16, scores over head_dim 4, weighted values over at most 7 keys, output projection over 16.
TOL32 = worst_case(torch.float32, 16 + 4 + 7 + 16)


@pytest.fixture
def sdpa_calls(monkeypatch):
    """Record the keyword arguments of every torch SDPA call made by MultiHeadAttention."""
    calls, sdpa = [], F.scaled_dot_product_attention

    def spy(q, k, v, **kwargs):  # keeps the arguments that change something
        calls.append({"n_q": q.shape[-2], "n_k": k.shape[-2],
                      **{name: a for name, a in kwargs.items() if a is not None and a is not False}})
        return sdpa(q, k, v, **kwargs)

    monkeypatch.setattr(mhsa.core.functional.F, "scaled_dot_product_attention", spy)
    return calls


@pytest.mark.parametrize("seed", [0, 1])
def test_square_causal_runs_torchs_is_causal_without_a_mask_and_matches_explicit(sdpa_calls, seed):
    mha, x = small_mha(seed), torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(seed))
    fused, _ = mha(x, is_causal=True)
    assert sdpa_calls == [{"n_q": 6, "n_k": 6, "dropout_p": 0.0, "is_causal": True}]
    torch.testing.assert_close(fused, mha(x, is_causal=True, need_weights=True)[0], **TOL32)


def test_one_cached_query_runs_without_any_mask(sdpa_calls):
    mha, x, cache = small_mha(), torch.randn(1, 5, 16), KVCache()
    mha(x[:, :4], cache=cache)
    mha(x[:, 4:], cache=cache)
    assert sdpa_calls[1] == {"n_q": 1, "n_k": 5, "dropout_p": 0.0}


@pytest.mark.parametrize("n_q, n_k", [(3, 7), (7, 3)], ids=["fewer_queries", "more_queries"])
def test_rectangular_causal_is_aligned_bottom_right_with_an_explicit_mask(sdpa_calls, n_q, n_k):
    mha, g = small_mha(), torch.Generator().manual_seed(0)
    query, memory = torch.randn(2, n_q, 16, generator=g), torch.randn(2, n_k, 16, generator=g)
    fused, _ = mha(query, memory, is_causal=True)
    explicit, _ = mha(query, memory, is_causal=True, need_weights=True)
    (call,) = sdpa_calls  # torch's is_causal would align top-left: a mask is passed instead
    assert "is_causal" not in call and call["attn_mask"].shape == (n_q, n_k)
    torch.testing.assert_close(fused, explicit, **TOL32)
    if n_q > n_k:  # the first n_q - n_k queries see no key: output is out_proj's bias
        bias = mha.out_proj.bias.expand(2, n_q - n_k, 16)
        torch.testing.assert_close(fused[:, : n_q - n_k], bias, atol=0, rtol=0)  # 0 @ W + b = b


PEAK_SCRIPT = textwrap.dedent("""
    import torch
    from mhsa import MultiHeadAttention
    from mhsa.course.measure import peak_memory
    torch.manual_seed(0)
    mha = MultiHeadAttention(256, 8).eval()  # head_dim 32
    x = torch.randn(1, 16_384, 256)
    with torch.inference_mode():
        mha(x[:, :64]), mha(x[:, :64], is_causal=True)  # load the kernels first
        for is_causal in (False, True):
            print(peak_memory(lambda: mha(x, is_causal=is_causal)))
""")


@pytest.mark.skipif(not peak_memory_supported(), reason="peak RSS can only be reset on Linux")
def test_fused_forward_at_16k_tokens_adds_under_half_a_gib():
    # The scores alone would be 8 heads * 16384**2 * 4 bytes = 8 GiB. A fresh process, so
    # that nothing else this test session did is counted.
    result = subprocess.run([sys.executable, "-c", PEAK_SCRIPT], capture_output=True, text=True,
                            timeout=300, check=True)
    plain, causal = (int(line) for line in result.stdout.split())
    assert plain < 2**29, f"no mask: {plain / 2**30:.2f} GiB"
    assert causal < 2**29, f"causal: {causal / 2**30:.2f} GiB"


def compile_unavailable() -> str:
    """Why torch.compile cannot run here, or '' when it can."""
    if not torch._dynamo.is_dynamo_supported():
        return f"torch.compile does not support Python {sys.version.split()[0]} here"
    if not any(shutil.which(cc) for cc in ("gcc", "cc", "clang")):
        return "torch.compile's CPU backend needs a C compiler (gcc, cc or clang); none found"
    return ""


@pytest.mark.skipif(bool(compile_unavailable()), reason=compile_unavailable() or "available")
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
def test_torch_compile_fullgraph_gives_the_same_output():
    # fullgraph=True raises at the first graph break, so compiling at all shows there is none.
    torch._dynamo.reset()
    mha = small_mha(3)
    g = torch.Generator().manual_seed(3)
    x, keep = torch.randn(2, 5, 16, generator=g), mhsa.padding_mask(torch.tensor([5, 3]), 5)
    compiled = torch.compile(mha, fullgraph=True)
    with torch.no_grad():
        for kwargs in ({}, {"is_causal": True}, {"attn_mask": keep, "is_causal": True}):
            torch.testing.assert_close(compiled(x, **kwargs)[0], mha(x, **kwargs)[0], **TOL32)
