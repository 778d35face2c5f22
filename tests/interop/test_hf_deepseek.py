"""Reading transformers' DeepseekV3Attention: sizes, the weight mapping, the refusals.

The outputs of the copy against transformers' module are tested in
``tests/attention/test_latent.py``; here, what the conversion reads and writes.
"""

import pytest
import torch

from mhsa import MultiHeadLatentAttention
from mhsa.interop.hf_deepseek import (
    config_from_hf_deepseek_attention,
    copy_hf_deepseek_attention,
    hf_deepseek_attention_pairs,
)

from references import hf_deepseek_attention


def test_config_reads_the_sizes_and_the_rope_theta():
    theirs = hf_deepseek_attention(q_lora_rank=16, kv_lora_rank=12, nope=8, rope=6, v=10,
                                   theta=500.0)
    assert config_from_hf_deepseek_attention(theirs) == {
        "embed_dim": 32, "num_heads": 4, "q_lora_rank": 16, "kv_lora_rank": 12,
        "qk_nope_head_dim": 8, "qk_rope_head_dim": 6, "v_head_dim": 10, "rope_base": 500.0,
        "rope_scaling": None}
    assert config_from_hf_deepseek_attention(hf_deepseek_attention(q_lora_rank=None))[
        "q_lora_rank"] is None


def test_config_reads_deepseek_v3s_yarn():
    """DeepSeek-V3's released rope_scaling (there with factor 40 over 4096 positions)."""
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16,
            "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}
    theirs = hf_deepseek_attention(rope_parameters={**yarn, "rope_theta": 1e4},
                                   max_position_embeddings=64)
    config = config_from_hf_deepseek_attention(theirs)
    assert (config["rope_base"], config["rope_scaling"]) == (1e4, yarn)
    ours = MultiHeadLatentAttention.from_hf(theirs)
    assert ours.rope_scaling == {**yarn, "truncate": True}
    assert ours.scale == pytest.approx(theirs.scaling, rel=1e-12)  # times (0.1 ln 4 + 1)^2


def test_from_hf_copies_every_weight_and_both_epsilons():
    theirs = hf_deepseek_attention(interleave=False)
    theirs.q_a_layernorm.variance_epsilon, theirs.kv_a_layernorm.variance_epsilon = 1e-5, 3e-6
    ours = MultiHeadLatentAttention.from_hf(theirs)
    assert (ours.q_a_norm.eps, ours.kv_a_norm.eps) == (1e-5, 3e-6) and not ours.training
    names = {"q_a_proj": "q_a_proj", "q_a_norm": "q_a_layernorm", "q_b_proj": "q_b_proj",
             "kv_a_proj": "kv_a_proj_with_mqa", "kv_a_norm": "kv_a_layernorm",
             "kv_b_proj": "kv_b_proj", "out_proj": "o_proj"}
    assert {name.rsplit(".", 1)[0] for name in ours.state_dict()} == set(names)
    for mine, their in names.items():
        assert torch.equal(ours.get_submodule(mine).weight, theirs.get_submodule(their).weight)


def test_interleaved_rotary_rows_are_permuted_evens_then_odds():
    theirs = hf_deepseek_attention(q_lora_rank=None, interleave=True)  # rope 6, nope 8, c 12
    pairs = {ours: tensor for ours, tensor, _ in hf_deepseek_attention_pairs(theirs, "attn.")}
    half = [0, 2, 4, 1, 3, 5]
    kv = theirs.kv_a_proj_with_mqa.weight
    assert torch.equal(pairs["attn.kv_a_proj.weight"][:12], kv[:12])  # the latent's rows stay
    assert torch.equal(pairs["attn.kv_a_proj.weight"][12:], kv[[12 + k for k in half]])
    q = theirs.q_proj.weight.view(4, 14, 32)
    mine = pairs["attn.q_proj.weight"].view(4, 14, 32)
    assert torch.equal(mine[:, :8], q[:, :8])  # each head's part without positions stays
    assert torch.equal(mine[:, 8:], q[:, [8 + k for k in half]])


def test_a_module_built_for_other_sizes_is_refused():
    theirs = hf_deepseek_attention()
    ours = MultiHeadLatentAttention(32, 4, q_lora_rank=16, kv_lora_rank=10, qk_nope_head_dim=8,
                                    qk_rope_head_dim=6, v_head_dim=10)
    with pytest.raises(ValueError, match=r"'kv_a_proj_with_mqa.weight' has shape \(18, 32\), "
                                         r"expected \(16, 32\)"):
        copy_hf_deepseek_attention(ours, theirs)


@pytest.mark.parametrize(("config", "message"), [
    ({"rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4, "short_factor": [1.0],
                          "long_factor": [1.0]}}, "`module` has rope type 'longrope'"),
    ({"rope_parameters": {"rope_type": "linear", "rope_theta": 1e4, "factor": 4.0,
                          "mscale_all_dim": 1.0}},
     "rope type 'linear' with mscale_all_dim=1.0"),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
                          "partial_rotary_factor": 0.5}}, "partial_rotary_factor=0.5"),
    ({"attention_bias": True}, r"attention_bias=True \(no biases\)"),
    ({"attention_dropout": 0.1}, "attention_dropout=0.1"),
    ({"num_key_value_heads": 2}, "num_key_value_heads=2"),
], ids=["longrope", "linear_mscale", "partial", "bias", "dropout", "kv_heads"])
def test_what_the_module_cannot_represent_is_refused(config, message):
    theirs = hf_deepseek_attention(**config)
    with pytest.raises(ValueError, match=message + ".*cannot represent it"):
        MultiHeadLatentAttention.from_hf(theirs)


def test_another_module_is_refused():
    with pytest.raises(TypeError, match="must be a transformers DeepseekV3Attention, got Linear"):
        MultiHeadLatentAttention.from_hf(torch.nn.Linear(2, 2))
