"""mhsa.core.heads: the einops head split and merge, against torch's view/transpose."""

import torch

from mhsa.core.heads import merge_heads, repeat_kv_heads, split_heads


def test_split_is_view_and_transpose_and_merge_inverts_it():
    x = torch.randn(2, 5, 12, generator=torch.Generator().manual_seed(0))  # 12 = 3 heads of 4
    heads = split_heads(x, 3)
    assert torch.equal(heads, x.view(2, 5, 3, 4).transpose(1, 2))
    assert torch.equal(heads[:, 1], x[..., 4:8])  # head 1 gets columns 4..7
    assert torch.equal(merge_heads(heads), x)


def test_repeat_kv_heads_gives_query_head_h_the_key_head_h_over_r():
    kv = torch.randn(1, 2, 3, 4, generator=torch.Generator().manual_seed(1))  # g = 2
    repeated = repeat_kv_heads(kv, 3)  # r = 3: 6 query heads
    assert torch.equal(repeated, kv.repeat_interleave(3, dim=1))
    assert all(torch.equal(repeated[:, h], kv[:, h // 3]) for h in range(6))
