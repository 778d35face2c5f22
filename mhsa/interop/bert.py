"""Reading a Hugging Face ``BertModel`` checkpoint (e.g. all-MiniLM-L6-v2) by our names.

transformers is never imported: the checkpoint is a dict of tensors (from safetensors).
"""

import re

from mhsa.interop.weights import copy_weights

_RENAMES = [  # our parameter names -> the Hugging Face BertModel's, one rule per module
    (r"^encoder\.layers\.(\d+)\.", r"encoder.layer.\1."),
    (r"self_attn\.q_proj\.", "attention.self.query."),
    (r"self_attn\.k_proj\.", "attention.self.key."),
    (r"self_attn\.v_proj\.", "attention.self.value."),
    (r"self_attn\.out_proj\.", "attention.output.dense."),
    (r"\.norm1\.", ".attention.output.LayerNorm."),
    (r"feed_forward\.linear1\.", "intermediate.dense."),
    (r"feed_forward\.linear2\.", "output.dense."),
    (r"\.norm2\.", ".output.LayerNorm."),
    (r"^embeddings\.norm\.", "embeddings.LayerNorm."),
]


def load_bert_weights(model, checkpoint: dict) -> None:
    """Copy a Hugging Face ``BertModel`` state dict into ``model``, checking every tensor.

    ``model`` is a ``mhsa.models.pretrained.BertEncoder``. Each of our parameters has one
    checkpoint name (``to_checkpoint_name``: e.g.
    ``encoder.layers.0.self_attn.q_proj.weight`` is ``encoder.layer.0.attention.self.query.weight``;
    both store ``nn.Linear`` weights as ``[out, in]``, so nothing is transposed). A
    ``bert.`` prefix and the old ``LayerNorm.gamma``/``beta`` names are accepted. Tensors
    the encoder does not use (``pooler.*``, ``embeddings.position_ids``, heads of
    pre-training) are ignored.

    Raises:
        ValueError: a tensor is missing, or its shape differs from the parameter's.

    Source: the parameter names of transformers' ``BertModel`` (Devlin et al. 2019, "BERT",
    section 3).
    """
    checkpoint = {_normalize_name(name): t for name, t in checkpoint.items()}
    pairs = []
    for ours, parameter in model.state_dict().items():
        theirs = to_checkpoint_name(ours)
        if theirs not in checkpoint:
            raise ValueError(f"tensor {theirs!r} (for {ours}, shape {tuple(parameter.shape)}) "
                             "is missing from model.safetensors")
        pairs.append((ours, checkpoint[theirs], theirs))
    copy_weights(model, pairs, source="model.safetensors")


def to_checkpoint_name(name: str) -> str:
    """Our parameter name -> the Hugging Face ``BertModel`` name of the same tensor."""
    for pattern, replacement in _RENAMES:
        name = re.sub(pattern, replacement, name)
    return name


def _normalize_name(name: str) -> str:
    name = name.removeprefix("bert.")
    return re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight",
                  re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", name))
