"""mhsa.models.pretrained: all-MiniLM-L6-v2 in our own modules, checked against two oracles.

Oracles: sentence-transformers (sentence embeddings) and transformers' BertModel (every
layer's hidden states and attention weights), both loaded from the same local folder.
Tolerance: float32 through 6 layers of width 384 (feed-forward 1536): per layer about
3 * 384 + 32 + 128 + 384 + 384 + 1536 + 4 * 384 terms summed along the chain to one entry,
some 5,000, so 30,000 for the model. The worst case (n * eps, 3.6e-3) is far too loose for
so long a chain; rounding errors of that many terms add like a random walk (tests/tolerances.py):
sqrt(30000) * eps = 2.1e-5.
"""

import json
import os
import shutil

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the oracles must never try the network
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import pytest
import torch
from safetensors.torch import save_file

from mhsa.interop.bert import to_checkpoint_name
from mhsa.models.pretrained import default_model_path, load_minilm

from tolerances import random_walk, worst_case

TEXTS = [
    "They stoned the witch.",
    "This guy got completely stoned.",
    "Why is the river so rich? Because it has two banks.",
    "Hi",
    "",
    ("A much longer sentence, with commas, subwords like unbelievably and tokenization, "
     "and enough words to need plenty of padding in the others."),
]
# 08.3 is a ratio of integers on both sides: one float64 rounding each
RATIO_TOL = {"rel": worst_case(torch.float64, 2)["rtol"], "abs": 0.0}
TOL = random_walk(torch.float32, 6 * (3 * 384 + 32 + 128 + 384 + 384 + 1536 + 4 * 384))


@pytest.fixture(scope="module")
def ours():
    return load_minilm(device="cpu")


@pytest.fixture(scope="module")
def sentence_transformer():
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(default_model_path()), device="cpu")


@pytest.fixture(scope="module")
def bert_outputs(ours):
    """transformers' BertModel on the padded batch: hidden states and attentions."""
    from transformers import BertModel

    model = BertModel.from_pretrained(str(default_model_path()), attn_implementation="eager")
    ids, lengths = ours.token_ids(TEXTS)
    mask = (torch.arange(ids.shape[1])[None, :] < lengths[:, None]).long()
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True,
                    output_attentions=True)
    return out, lengths


def test_encode_matches_sentence_transformers_batched(ours, sentence_transformer):
    expected = sentence_transformer.encode(TEXTS, convert_to_tensor=True, batch_size=len(TEXTS))
    torch.testing.assert_close(ours.encode(TEXTS), expected, **TOL)


def test_encode_matches_sentence_transformers_one_by_one(ours, sentence_transformer):
    for text in TEXTS:
        expected = sentence_transformer.encode([text], convert_to_tensor=True)
        torch.testing.assert_close(ours.encode(text), expected, **TOL)


def test_sentence_embeddings_have_unit_norm(ours):
    norms = ours.encode(TEXTS).norm(dim=-1)
    torch.testing.assert_close(norms, torch.ones(len(TEXTS)))


def test_batched_equals_one_by_one(ours):
    batched = ours.token_embeddings(TEXTS)
    n = batched.shape[1]
    for k, text in enumerate(TEXTS):
        alone = ours.token_embeddings(text)[0]
        m = alone.shape[0]
        torch.testing.assert_close(batched[k, :m], alone, **TOL)
        assert bool((batched[k, m:] == 0).all()), "padded positions must be zero"
        assert m <= n
    one_by_one = torch.cat([ours.encode(text) for text in TEXTS])
    torch.testing.assert_close(ours.encode(TEXTS), one_by_one, **TOL)


def test_hidden_states_match_bert_model_every_layer(ours, bert_outputs):
    out, lengths = bert_outputs
    states = ours.hidden_states(TEXTS)
    assert states.shape == (7, len(TEXTS), lengths.max().item(), 384)
    expected = torch.stack(out.hidden_states)
    for k, length in enumerate(lengths.tolist()):  # padded positions are ours to define
        torch.testing.assert_close(states[:, k, :length], expected[:, k, :length], **TOL)
    last = ours.token_embeddings(TEXTS)
    for k, length in enumerate(lengths.tolist()):
        torch.testing.assert_close(last[k, :length], out.last_hidden_state[k, :length], **TOL)


def test_attention_matches_bert_model_and_rows_sum_to_one(ours, bert_outputs):
    out, lengths = bert_outputs
    k = 2  # the river sentence
    weights = ours.attention(TEXTS[k])
    n = lengths[k].item()
    assert weights.shape == (6, 12, n, n)
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(6, 12, n), **TOL)
    expected = torch.stack([layer[k, :, :n, :n] for layer in out.attentions])
    torch.testing.assert_close(weights, expected, **TOL)


def test_tokenizer_wraps_text_in_cls_and_sep(ours):
    tokens = ours.tokenize("They stoned the witch.")
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
    assert tokens == ["[CLS]", "they", "stone", "##d", "the", "witch", ".", "[SEP]"]
    assert ours.tokenize("") == ["[CLS]", "[SEP]"]


def test_token_ids_pad_on_the_right_to_the_longest_text(ours):
    ids, lengths = ours.token_ids(["Hi", "They stoned the witch."])
    assert lengths.tolist() == [3, 8]
    assert ids.shape == (2, 8) and ids.dtype == torch.int64
    pad, cls = (ours.tokenizer.token_to_id(token) for token in ("[PAD]", "[CLS]"))
    assert ids[0, 3:].tolist() == [pad] * 5
    assert ids[:, 0].tolist() == [cls, cls]


def test_input_embeddings_are_static_word_vectors(ours):
    first, second = ours.input_embeddings(["They stoned the witch.",
                                           "This guy got completely stoned."])
    stone_1, stone_2 = first[2], second[5]  # the token "stone" in each sentence
    assert torch.equal(stone_1, stone_2)
    stone = ours.tokenizer.token_to_id("stone")
    torch.testing.assert_close(stone_1, ours.model.embeddings.word_embeddings.weight[stone])
    contextual = ours.token_embeddings(["They stoned the witch.",
                                        "This guy got completely stoned."])
    assert not torch.allclose(contextual[0, 2], contextual[1, 5], atol=100 * TOL["atol"])


def test_chapter_8_answers_match_the_oracles(sentence_transformer):
    from safetensors.torch import load_file
    from transformers import BertModel

    from mhsa.course.teaching import expected_answer

    # 08.1: largest weight any head of any layer puts on "money" from the query "banks"
    sentence = "She borrowed money from two banks to buy the house."
    model = BertModel.from_pretrained(str(default_model_path()), attn_implementation="eager")
    encoding = sentence_transformer.tokenizer(sentence, return_tensors="pt")
    tokens = sentence_transformer.tokenizer.convert_ids_to_tokens(encoding["input_ids"][0])
    with torch.no_grad():
        attentions = torch.stack(model(**encoding, output_attentions=True).attentions)
    banks_to_money = attentions[:, 0, :, tokens.index("banks"), tokens.index("money")].max()
    # 08.2: cosine of the two "stoned" sentences' embeddings
    a, b = sentence_transformer.encode(["They stoned the witch.",
                                        "This guy got completely stoned."], convert_to_tensor=True)
    cosine = torch.nn.functional.cosine_similarity(a, b, dim=0)
    # 08.3: the word table's share of the weights, counted in the checkpoint file (the pooler,
    # unused for sentence embeddings, and the position_ids buffer are not weights of the encoder)
    checkpoint = load_file(default_model_path() / "model.safetensors")
    total = sum(t.numel() for name, t in checkpoint.items()
                if not name.startswith("pooler.") and not name.endswith("position_ids"))
    share = checkpoint["embeddings.word_embeddings.weight"].numel() / total
    # the same model computed twice: within TOL, as the tests above show for every layer
    assert expected_answer("08.1") == pytest.approx(banks_to_money.item(), abs=TOL["atol"])
    assert expected_answer("08.2") == pytest.approx(cosine.item(), abs=TOL["atol"])
    assert expected_answer("08.3") == pytest.approx(share, **RATIO_TOL)


def test_bad_texts_raise(ours):
    with pytest.raises(TypeError, match="`texts` must be a str or a list of str, got int"):
        ours.encode(5)
    with pytest.raises(ValueError, match="`texts` must hold at least one text"):
        ours.encode([])
    with pytest.raises(TypeError, match="`text` must be a str, got list"):
        ours.attention(["a", "b"])


# --- other folders: errors, and any BERT-style checkpoint -------------------------------

def tiny_bert_folder(folder, *, prefix=""):
    """A random 2-layer BERT in the Hugging Face layout, saved by transformers itself."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=32, max_position_embeddings=40)
    model = BertModel(config).eval()
    model.save_pretrained(folder)
    if prefix:  # as a BertForMaskedLM checkpoint would name them
        state = {prefix + name: t.contiguous() for name, t in model.state_dict().items()}
        save_file(state, folder / "model.safetensors")
    shutil.copy(default_model_path() / "tokenizer.json", folder / "tokenizer.json")
    return model


@pytest.mark.parametrize("prefix", ["", "bert."])
def test_any_bert_folder_loads_with_sizes_from_its_config(tmp_path, prefix):
    reference = tiny_bert_folder(tmp_path, prefix=prefix)
    tiny = load_minilm(tmp_path, device="cpu")
    assert (tiny.num_layers, tiny.num_heads, tiny.embed_dim) == (2, 4, 16)
    assert tiny.max_tokens == 40  # no sentence_bert_config.json: the position count
    ids, lengths = tiny.token_ids(TEXTS[:3])
    mask = (torch.arange(ids.shape[1])[None, :] < lengths[:, None]).long()
    with torch.no_grad():
        expected = reference(input_ids=ids, attention_mask=mask).last_hidden_state
    got = tiny.token_embeddings(TEXTS[:3])
    for k, length in enumerate(lengths.tolist()):
        torch.testing.assert_close(got[k, :length], expected[k, :length], **TOL)


def test_long_texts_are_truncated_to_max_tokens(tmp_path):
    tiny_bert_folder(tmp_path)
    tiny = load_minilm(tmp_path, device="cpu")
    assert len(tiny.tokenize("word " * 100)) == 40
    assert tiny.encode("word " * 100).shape == (1, 16)


def test_folder_without_weights_names_the_missing_file(tmp_path):
    shutil.copy(default_model_path() / "config.json", tmp_path / "config.json")
    with pytest.raises(FileNotFoundError, match=r"model\.safetensors not found"):
        load_minilm(tmp_path, device="cpu")


def test_folder_without_tokenizer_names_the_missing_file(tmp_path):
    tiny_bert_folder(tmp_path)
    (tmp_path / "tokenizer.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"tokenizer\.json not found"):
        load_minilm(tmp_path, device="cpu")


def test_path_that_is_not_a_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="`path` must be a model folder"):
        load_minilm(tmp_path / "nowhere", device="cpu")


def test_mismatched_tensor_names_the_tensor_and_both_shapes(tmp_path):
    tiny_bert_folder(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["intermediate_size"] = 48  # the checkpoint's feed-forward is 32 wide
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"tensor 'encoder\.layer\.0\.intermediate\.dense\.weight' "
                                         r"has shape \(32, 16\), expected \(48, 16\)"):
        load_minilm(tmp_path, device="cpu")


def test_missing_tensor_is_named(tmp_path):
    from safetensors.torch import load_file

    tiny_bert_folder(tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    del state["encoder.layer.1.attention.self.key.bias"]
    save_file(state, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match=r"tensor 'encoder\.layer\.1\.attention\.self\.key\.bias' "
                                         r"\(for encoder\.layers\.1\.self_attn\.k_proj\.bias, "
                                         r"shape \(16,\)\) is missing"):
        load_minilm(tmp_path, device="cpu")


def test_config_of_another_architecture_is_refused(tmp_path):
    tiny_bert_folder(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["model_type"] = "roberta"
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="model_type 'roberta'; only 'bert' loads"):
        load_minilm(tmp_path, device="cpu")


def test_parameter_names_map_to_bert_names():
    assert to_checkpoint_name("encoder.layers.3.self_attn.q_proj.weight") == \
        "encoder.layer.3.attention.self.query.weight"
    assert to_checkpoint_name("encoder.layers.0.norm1.bias") == \
        "encoder.layer.0.attention.output.LayerNorm.bias"
    assert to_checkpoint_name("encoder.layers.5.feed_forward.linear2.weight") == \
        "encoder.layer.5.output.dense.weight"
    assert to_checkpoint_name("encoder.layers.5.norm2.weight") == \
        "encoder.layer.5.output.LayerNorm.weight"
    assert to_checkpoint_name("embeddings.norm.weight") == "embeddings.LayerNorm.weight"
    assert to_checkpoint_name("embeddings.word_embeddings.weight") == \
        "embeddings.word_embeddings.weight"
