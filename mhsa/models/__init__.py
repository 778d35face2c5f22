"""Models built from mhsa's layers, and decoding.

``encoder_decoder.py`` (chapters 5-6), ``causal_lm.py`` (chapters 10-11), ``vision.py``
(chapter 7), ``pretrained.py`` (a BERT-style encoder with MiniLM's weights, chapter 8),
``generation.py`` (the decoding loops and sampling filters).
"""
