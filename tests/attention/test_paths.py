"""One contract, every path: the same allowed input gives the same result on every route.

mhsa reaches one answer by several routes: the explicit ``scaled_dot_product_attention``
(``need_weights=True``), the fused kernel (``need_weights=False``), ``record_attention``,
``KVCache`` decoding and ``torch.compile``. The property test below sends one input through
all of them and demands the same output or the same exception type. The tests after it pin
the four kinds of fault that once made the paths disagree (issue 13, section 1), each of
which failed before its fix.

Tolerances, from the dtype and the size of the sums (embed_dim 8, at most 4 keys):
float64 (eps 2.2e-16): 1e-10, far above any reordering of ~50 terms. float32 (eps 1.2e-7):
1e-5, a hundred times the rounding of a few products and sums of 8 terms. bfloat16 (eps
7.8e-3, 8 significant bits): the explicit path rounds scores, weights and outputs to
bfloat16 where the fused kernel keeps float32 inside, so each of about four roundings may
differ by eps/2 relative on values up to ~4: 5e-2 absolute and relative.
"""

import copy
import pickle

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mhsa
from mhsa import GroupedQueryAttention, MultiHeadAttention

EMBED = 8
TOLERANCES = {torch.float64: 1e-10, torch.float32: 1e-5, torch.bfloat16: 5e-2}
COMPILE_EXAMPLES = 2  # torch.compile traces for ~5 s per new graph here: the first 2 inputs
_compiled = []


@st.composite
def cases(draw):
    """An input to every path: module settings, sizes 0 to 4, a mask of rank 0 to 4.

    ``grouped``: a GroupedQueryAttention (causal self-attention, shared key/value heads,
    rotary positions, window); else a MultiHeadAttention (self- or cross-attention).
    """
    num_heads = draw(st.sampled_from([1, 2, 4]))
    grouped = draw(st.booleans())
    num_kv_heads = draw(st.sampled_from([g for g in (1, 2, 4) if num_heads % g == 0])) \
        if grouped else num_heads
    self_attention = grouped or draw(st.booleans())
    batch, n_q = draw(st.integers(0, 2)), draw(st.integers(0, 4))
    n_k = n_q if self_attention else draw(st.integers(0, 4))
    causal = grouped or draw(st.booleans())
    full = (batch, num_heads, n_q, n_k)
    rank = draw(st.none() | st.integers(0, 4))
    mask_shape = None
    if rank is not None:  # each dimension 1 or full, now and then a size that cannot broadcast
        mask_shape = tuple(draw(st.sampled_from([1, size, size, size + 2]))
                           for size in full[4 - rank:])
    return {
        "grouped": grouped, "num_heads": num_heads, "num_kv_heads": num_kv_heads,
        "self_attention": self_attention,
        "batch": batch, "n_q": n_q, "n_k": n_k, "causal": causal, "mask_shape": mask_shape,
        "rope": grouped and draw(st.booleans()),
        "window": draw(st.none() | st.integers(1, 3)) if grouped else None,
        "dtype": draw(st.sampled_from([torch.float32, torch.float64, torch.bfloat16])),
        "train": draw(st.booleans()),
        "meta": draw(st.integers(0, 5)) == 0,
        "chunk": draw(st.integers(0, n_q)),  # the cache path's first chunk
        "seed": draw(st.integers(0, 2**16)),
    }


def outcome(fn):
    """What a path gives: its output, or the type of the exception it raised."""
    try:
        return fn()
    except (TypeError, ValueError, RuntimeError, IndexError) as error:
        return type(error)


def rows_and_columns(mask, start, end):
    """The part of a mask for ``[.., n, n]`` that a cached chunk of queries start:end reads."""
    if mask is None:
        return None
    if mask.dim() >= 2 and mask.shape[-2] not in (1,) and mask.shape[-2] >= end:
        mask = mask[..., start:end, :]
    if mask.dim() >= 1 and mask.shape[-1] != 1 and mask.shape[-1] >= end:
        mask = mask[..., :end]
    return mask


def paths(mha, x, kv, mask, c):
    """name -> zero-argument function running the input through that path."""
    kw = {"attn_mask": mask} if c["grouped"] else {"attn_mask": mask, "is_causal": c["causal"]}
    key = () if c["self_attention"] else (kv,)

    def recorded():
        with mhsa.record_attention(mha) as weights:
            out, _ = mha(x, *key, **kw)
        assert weights[""].shape == (c["batch"], c["num_heads"], c["n_q"], c["n_k"])
        return out

    def cached():
        cache, start, outs = mha.new_cache(), 0, []
        for end in (c["chunk"], c["n_q"]):
            outs.append(mha(x[:, start:end], cache=cache,
                            attn_mask=rows_and_columns(mask, start, end))[0])
            start = end
        return torch.cat(outs, dim=1)

    runs = {
        "explicit": lambda: mha(x, *key, need_weights=True, **kw)[0],
        "fused": lambda: mha(x, *key, **kw)[0],
        "record_attention": recorded,
    }
    full = (c["batch"], c["num_heads"], c["n_q"], c["n_k"])
    fits = mask is None or (mask.dim() <= 4 and all(  # a bad mask: the cache path's slices
        m in (1, f) for m, f in zip(reversed(mask.shape), reversed(full))))  # could hide it
    if c["self_attention"] and c["causal"] and fits:
        runs["KVCache"] = cached
    if not c["meta"] and fits and len(_compiled) < COMPILE_EXAMPLES:  # compiled, an error
        # inside becomes dynamo's Unsupported ("Observed exception"): valid inputs only
        _compiled.append(c)
        compiled = torch.compile(mha, fullgraph=True, backend="eager")
        runs["torch.compile"] = lambda: compiled(x, *key, **kw)[0]
    return runs


@settings(max_examples=80, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cases())
def test_every_path_gives_the_same_result(c):
    torch.manual_seed(c["seed"])
    device = "meta" if c["meta"] else "cpu"
    kw = {"dtype": c["dtype"], "device": device}
    if c["grouped"]:
        mha = GroupedQueryAttention(EMBED, c["num_heads"], c["num_kv_heads"], bias=True,
                                    rope_base=100.0 if c["rope"] else None, window=c["window"],
                                    **kw)
    else:
        mha = MultiHeadAttention(EMBED, c["num_heads"], **kw)
    mha.train(c["train"])
    g = torch.Generator().manual_seed(c["seed"])
    x = torch.randn(c["batch"], c["n_q"], EMBED, generator=g).to(device, c["dtype"])
    kv = torch.randn(c["batch"], c["n_k"], EMBED, generator=g).to(device, c["dtype"])
    mask = None
    if c["mask_shape"] is not None:
        mask = (torch.rand(c["mask_shape"], generator=g) < 0.7).to(device)
    results = {name: outcome(run) for name, run in paths(mha, x, kv, mask, c).items()}
    first = results["explicit"]
    if not isinstance(first, torch.Tensor):  # an exception: the same type everywhere
        assert all(r is first for r in results.values()), results
        return
    assert first.shape == (c["batch"], c["n_q"], EMBED) and first.dtype == c["dtype"]
    tol = TOLERANCES[c["dtype"]]
    for name, result in results.items():
        assert isinstance(result, torch.Tensor), f"{name} raised {result}, explicit did not"
        assert result.shape == first.shape and result.dtype == first.dtype, name
        if not c["meta"]:
            torch.testing.assert_close(result, first, atol=tol, rtol=tol, msg=name)


# -- the four kinds of fault, one test each -------------------------------------------------

@pytest.mark.parametrize("mask", [torch.tensor(True), torch.tensor(False),
                                  torch.tensor([True, True, True, False])],
                         ids=["rank0_true", "rank0_false", "rank1"])
def test_masks_of_rank_0_and_1_work_on_the_fused_path(mask):
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(2, 4, 8)
    fused, _ = mha(x, attn_mask=mask)  # raised IndexError before
    explicit, _ = mha(x, attn_mask=mask, need_weights=True)
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=1e-5)
    layer = mhsa.EncoderLayer(8, 2, 16).eval()
    with mhsa.record_attention(layer):
        inside = layer(x, attn_mask=mask)
    torch.testing.assert_close(layer(x, attn_mask=mask), inside, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
def test_empty_sequences_give_empty_outputs_and_keyless_queries_zeros(need_weights):
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2).eval()
    out, _ = mha(torch.randn(2, 0, 8), is_causal=True, need_weights=need_weights)
    assert out.shape == (2, 0, 8)
    out, weights = mha(torch.randn(2, 3, 8), torch.randn(2, 0, 8), is_causal=True,
                       need_weights=need_weights)
    torch.testing.assert_close(out, mha.out_proj.bias.expand(2, 3, 8))  # zero attention output
    assert weights is None or weights.shape == (2, 2, 3, 0)
    assert mhsa.causal_mask(0, 3).shape == (0, 3) and mhsa.causal_mask(2, 0).shape == (2, 0)
    decoder = mhsa.DecoderLayer(8, 2, 16).eval()
    assert decoder(torch.randn(0, 3, 8), torch.randn(0, 5, 8)).shape == (0, 3, 8)


def test_mask_builders_work_on_meta_tensors_and_compile_without_graph_breaks():
    meta = torch.tensor([3, 5], device="meta")
    assert mhsa.padding_mask(meta, 5).shape == (2, 1, 1, 5)  # read values before: failed
    assert mhsa.padding_mask(meta, 5).device.type == "meta"
    assert mhsa.mask_from_additive(torch.zeros(2, 3, device="meta")).shape == (2, 3)

    def masks(lengths):
        return (mhsa.padding_mask(lengths, 5) & mhsa.causal_mask(5)
                & mhsa.sliding_window_mask(5, window=2))

    compiled = torch.compile(masks, fullgraph=True, backend="eager")  # a graph break raises
    lengths = torch.tensor([3, 5])
    assert torch.equal(compiled(lengths), masks(lengths))
    with pytest.raises(ValueError, match="must lie in"):  # values checked where readable
        mhsa.padding_mask(torch.tensor([6]), 5)


@pytest.mark.parametrize("copy_with", ["deepcopy", "pickle"])
def test_recording_state_never_travels_with_a_copy(copy_with):
    encoder = mhsa.Encoder(8, 2, 16, 2).eval()
    with mhsa.record_attention(encoder):
        twin = (copy.deepcopy(encoder) if copy_with == "deepcopy"
                else pickle.loads(pickle.dumps(encoder)))
    with mhsa.record_attention(twin) as weights:  # raised "already inside" before
        twin(torch.randn(1, 3, 8))
    assert sorted(weights) == ["layers.0.self_attn", "layers.1.self_attn"]


def test_record_attention_works_on_a_bare_multihead_attention():
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(1, 3, 8)
    with mhsa.record_attention(mha) as weights:  # raised ValueError before
        out, returned = mha(x)
    assert returned is None  # recording does not change what forward returns
    _, expected = mha(x, need_weights=True)
    torch.testing.assert_close(weights[""], expected)
    torch.testing.assert_close(out, mha(x)[0], atol=1e-5, rtol=1e-5)


def test_fully_masked_rows_are_zero_in_torchs_own_kernel():
    """Why the fused path needs no special case on CPU (torch >= 2.5): torch gives zeros."""
    q, k, v = (torch.randn(1, 2, 3, 4, requires_grad=True) for _ in range(3))
    mask = torch.tensor([[True, False, True], [False, False, False], [True, True, True]])
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.equal(out[:, :, 1], torch.zeros(1, 2, 4))
    out.sum().backward()
    assert all(t.grad.isfinite().all() for t in (q, k, v))
