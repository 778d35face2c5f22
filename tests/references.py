"""What the tests and the benchmarks compare mhsa with, written once.

- Plain-torch references: multi-head attention written with ``F.linear``, view/transpose and
  ``F.scaled_dot_product_attention`` (or the softmax written out) over an mhsa module's own
  weights.
- Oracles with weights that make a comparison mean something: torch's
  ``nn.MultiheadAttention`` with biases that are not zero, transformers' Llama and Mistral
  with spread-out weights.
- Factories for the small seeded models the tests share, and test doubles.

The benchmarks import this file too (``benchmarks/*.py`` put ``tests/`` on ``sys.path``), so
it imports nothing but torch and mhsa at the top; transformers only inside the function that
needs it. Letters as in the package: b batch, n tokens, h heads, d head_dim, e embed_dim.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

import mhsa
from mhsa import KVCache

# -- plain-torch attention over an mhsa module's weights -------------------------------------


def _project(mha, query, key, value):
    """q [b, h, n_q, d], k and v [b, h_kv, n_k, d]: ``F.linear``, then view and transpose."""
    key = query if key is None else key
    value = key if value is None else value
    d = mha.head_dim

    def heads(x, proj):  # [b, n, h*d] -> [b, h, n, d]
        return F.linear(x, proj.weight, proj.bias).view(*x.shape[:2], -1, d).transpose(1, 2)

    return heads(query, mha.q_proj), heads(key, mha.k_proj), heads(value, mha.v_proj)


def _merge(mha, out):
    """[b, h, n_q, d] -> [b, n_q, h*d], then the output projection."""
    out = out.transpose(1, 2).flatten(2)
    return F.linear(out, mha.out_proj.weight, mha.out_proj.bias)


def plain_attention(mha, query, key=None, value=None, *, attn_mask=None, is_causal=False,
                    rope_base=None, positions=None):
    """``mha``'s forward in plain torch: linear, view/transpose, ``F.scaled_dot_product_attention``,
    transpose/flatten, linear. The textbook module, and the floor a benchmark compares with.

    ``key`` defaults to ``query``, ``value`` to ``key``. ``attn_mask``: bool, True = may
    attend. ``is_causal`` is torch's (top-left aligned: equal to mhsa's only when n_q == n_k).
    ``rope_base``: rotate queries and keys at ``positions`` (default ``arange(n)``) with
    :func:`mhsa.apply_rotary`. Fewer key/value heads than query heads: torch's ``enable_gqa``.
    """
    q, k, v = _project(mha, query, key, value)
    if rope_base is not None:
        positions = torch.arange(q.shape[-2]) if positions is None else positions
        q = mhsa.apply_rotary(q, positions, base=rope_base)
        k = mhsa.apply_rotary(k, positions, base=rope_base)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal,
                                         enable_gqa=k.shape[1] != q.shape[1])
    return _merge(mha, out)


def plain_explicit_attention(mha, query, key=None, value=None, *, attn_mask=None):
    """``(output, weights [b, h, n_q, n_k])``: :func:`plain_attention` with the softmax written
    out, ``softmax(q k^T / sqrt(d)) v`` (Vaswani et al. 2017, section 3.2.1); equal heads."""
    q, k, v = _project(mha, query, key, value)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return _merge(mha, weights @ v), weights


def run_hf_attention(module, x, rotary_embedding):
    """A transformers attention module's forward on ``x`` ``[b, n, e]``: its model's rotary
    cos/sin at ``arange(n)`` (``rotary_embedding``, the model's rotary class), and the causal
    (or, with ``module.sliding_window``, sliding-window) mask of mhsa as an additive one.
    Returns the module's ``(output, weights)``."""
    n = x.shape[1]
    positions = torch.arange(n)[None].expand(x.shape[0], -1)
    cos, sin = rotary_embedding(module.config)(x, positions)
    window = module.sliding_window
    mask = mhsa.causal_mask(n) if window is None else mhsa.sliding_window_mask(n, window=window)
    additive = mhsa.mask_to_additive(mask)[None, None].expand(x.shape[0], 1, n, n)
    return module(x, position_embeddings=(cos, sin), attention_mask=additive)


def decode_in_chunks(module, x, sizes, **kwargs):
    """Feed ``x`` [b, n, e] to ``module`` in consecutive chunks of ``sizes`` with one cache:
    ``(outputs [b, n, e], cache)``. The sizes must add up to n."""
    cache, outputs, start = module.new_cache(), [], 0
    for size in sizes:
        outputs.append(module(x[:, start:start + size], cache=cache, **kwargs)[0])
        start += size
    assert start == x.shape[1] and len(cache) == x.shape[1]
    return torch.cat(outputs, dim=1), cache


# -- oracles ---------------------------------------------------------------------------------


def torch_mha(embed_dim, num_heads, *, seed=0, bias=True, **kwargs):
    """A seeded ``nn.MultiheadAttention(batch_first=True)`` in eval mode whose biases are drawn
    from N(0, 1): torch initialises them to zero, and a copy that drops them would pass."""
    torch.manual_seed(seed)
    module = nn.MultiheadAttention(embed_dim, num_heads, bias=bias, batch_first=True, **kwargs)
    if bias:
        with torch.no_grad():
            module.in_proj_bias.normal_()
            module.out_proj.bias.normal_()
    return module.eval()


@torch.no_grad()
def spread_weights_(model):
    """``model`` with spread-out weights, in place: norms in [0.5, 1.5], embeddings N(0, 1),
    other matrices N(0, 1 / fan_in).

    transformers' 0.02 initialisation gives near-uniform logits, where greedy argmax would
    hinge on rounding; unit-variance activations do not. No norm is the identity.
    """
    for name, p in model.named_parameters():
        if "norm" in name:
            p.uniform_(0.5, 1.5)
        elif p.dim() == 2:
            p.normal_(0.0, 1.0 if "embed" in name else p.shape[1] ** -0.5)
    return model


def hf_llama(kind="llama", *, vocab=97, hidden=32, intermediate=48, layers=2, heads=4,
             kv_heads=2, head_dim=None, theta=10000.0, window=None, tie=False, seed=0,
             rope=None, max_positions=None):
    """A random transformers ``LlamaForCausalLM`` (``kind="llama"``) or ``MistralForCausalLM``,
    eval mode, with :func:`spread_weights_`.

    ``window``: Llama gets a ``sliding_window`` key (which transformers' Llama ignores) unless
    None; Mistral gets it unless ``"default"`` (MistralConfig's own, 4096). ``rope``: the
    ``rope_parameters`` besides ``rope_theta`` (default ``{"rope_type": "default"}``);
    ``max_positions``: ``max_position_embeddings`` (default the config's).
    """
    from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM

    kw = {"vocab_size": vocab, "hidden_size": hidden, "intermediate_size": intermediate,
          "num_hidden_layers": layers, "num_attention_heads": heads,
          "num_key_value_heads": kv_heads, "head_dim": head_dim, "rms_norm_eps": 1e-5,
          "rope_parameters": {"rope_type": "default", **(rope or {}), "rope_theta": theta},
          "tie_word_embeddings": tie, "bos_token_id": None, "eos_token_id": None,
          "pad_token_id": None}
    if max_positions is not None:
        kw["max_position_embeddings"] = max_positions
    if kind == "llama":
        extra = {} if window is None else {"sliding_window": window}
        config, cls = LlamaConfig(**kw, **extra), LlamaForCausalLM
    else:
        extra = {} if window == "default" else {"sliding_window": window}
        config, cls = MistralConfig(**kw, **extra), MistralForCausalLM
    torch.manual_seed(seed)
    return spread_weights_(cls(config).eval())


def hf_deepseek_attention(*, hidden=32, heads=4, q_lora_rank=16, kv_lora_rank=12, nope=8,
                          rope=6, v=10, theta=1000.0, interleave=True, seed=0, **config):
    """A random transformers ``DeepseekV3Attention`` (eager attention), eval mode, with
    :func:`spread_weights_`; ``config`` adds ``DeepseekV3Config`` settings (``attention_bias``,
    ``rope_parameters`` ...)."""
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention

    kw = {"hidden_size": hidden, "num_attention_heads": heads, "num_key_value_heads": heads,
          "q_lora_rank": q_lora_rank, "kv_lora_rank": kv_lora_rank, "qk_nope_head_dim": nope,
          "qk_rope_head_dim": rope, "v_head_dim": v, "rope_interleave": interleave,
          "rope_parameters": {"rope_type": "default", "rope_theta": theta}, **config}
    config = DeepseekV3Config(**kw)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    return spread_weights_(DeepseekV3Attention(config, layer_idx=0).eval())


def hf_deepseek_forward(module, x, position_ids, attn_mask=None):
    """``(output, weights)`` of a transformers ``DeepseekV3Attention`` on hidden states ``x``
    ``[b, n, e]`` at ``position_ids`` ``[b, n]``, as its model calls it: the angles of its
    ``DeepseekV3RotaryEmbedding`` and an additive mask (0 / -inf) made from ``attn_mask``
    (bool, True = may attend, ``[n, n]`` or ``[b, 1, n, n]``; default causal)."""
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3RotaryEmbedding

    n = x.shape[1]
    keep = mhsa.causal_mask(n) if attn_mask is None else attn_mask
    additive = mhsa.mask_to_additive(keep.expand(x.shape[0], 1, n, n), x.dtype)
    angles = DeepseekV3RotaryEmbedding(module.config)(x, position_ids)
    return module(x, angles, additive)


# -- small seeded models ---------------------------------------------------------------------


def small_mha(seed=0, embed_dim=16, num_heads=4, **kwargs):
    """A seeded ``mhsa.MultiHeadAttention`` in eval mode (default initialisation)."""
    torch.manual_seed(seed)
    return mhsa.MultiHeadAttention(embed_dim, num_heads, **kwargs).eval()


def encoder_decoder(seed=0, *, vocab=13, embed_dim=32, num_heads=4, ff_dim=64, num_layers=2,
                    **kwargs):
    """A seeded ``mhsa.EncoderDecoder`` in eval mode, chapter 6's size by default (vocabulary
    13 for source and target, width 32, 4 heads, feed-forward 64, 2 layers, pad id 0, no
    dropout)."""
    torch.manual_seed(seed)
    kwargs = {"dropout": 0.0, "pad_id": 0, **kwargs}
    return mhsa.EncoderDecoder(vocab, vocab, embed_dim, num_heads, ff_dim, num_layers,
                               **kwargs).eval()


# -- test doubles ----------------------------------------------------------------------------


def record_kv_caches(monkeypatch, module) -> list:
    """The list of every ``KVCache`` that ``module`` (say ``mhsa.models.causal_lm``) makes
    from now on, in order: its ``KVCache`` name is patched with a subclass that records."""
    made = []

    class Recorded(KVCache):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            made.append(self)

    monkeypatch.setattr(module, "KVCache", Recorded)
    return made
