"""Weights to and from other libraries, by name mappings; nothing here imports mhsa's modules
above ``mhsa.core``.

``torch_nn.py``: ``torch.nn.MultiheadAttention`` and ``torch.nn.Transformer*Layer``;
``hf_llama.py``: transformers' Llama and Mistral causal LMs (transformers is never imported);
``hf_qwen3.py``: transformers' Qwen3 attention module.
"""
