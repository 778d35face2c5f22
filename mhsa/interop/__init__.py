"""Weights to and from other libraries, by name mappings; nothing here imports mhsa's modules
above ``mhsa.core``.

``torch_nn.py``: ``torch.nn.MultiheadAttention`` and ``torch.nn.Transformer*Layer``;
``hf_llama.py``: transformers' Llama and Mistral causal LMs; ``hf_qwen3.py``: Qwen3's
attention module; ``hf_deepseek.py``: DeepSeek-V3's latent attention;
``hf_attention_modules.py``: one transformers ``Gemma2Attention`` or ``GptOssAttention``
(transformers is never imported).
"""
