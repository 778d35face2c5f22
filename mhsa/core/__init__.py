"""The core: functions and small objects that every higher layer builds on.

``functional.py`` (the attention function and mhsa's mask rules around torch's fused kernel),
``flash.py`` (FlashAttention-2 in plain loops, with its backward pass),
``masks.py``, ``heads.py`` (einops head split and merge), ``rotary.py``, ``cache.py``
(:class:`mhsa.KVCache`), ``quantized_cache.py`` (an int8 drop-in for it), ``flex.py`` (the
masks as FlexAttention ``mask_mod`` functions), ``patches.py``, ``device.py``; private:
``_checks.py`` (argument checks with clear messages) and ``_packing.py`` (weight layouts for
decoding).
"""
