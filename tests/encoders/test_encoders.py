"""The encoder adapter (dstg_interp.encoders): states identical to run_with_cache / output_hidden_states,
special tokens read from the tokenizer, names, attention, errors, and every CLI taking every kind of --model."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from tokenizers.implementations import BertWordPieceTokenizer
from transformers import AutoModel, BertConfig, BertModel, DistilBertConfig, DistilBertModel, PreTrainedTokenizerFast

from conftest import VARIANTS, tiny_model, write_synthetic_corpus
from dstg_interp import extract
from dstg_interp.data import load_corpus, train_tokenizer
from dstg_interp.encoders import (FINAL, EncoderError, HFEncoder, HookedEncoder, length_sorted_batches, open_encoder,
                                  special_tokens)
from dstg_interp.encoders.hooks import layer_hooks
from dstg_interp.cli.cache import main as cache_main
from dstg_interp.cli.probe import main as probe_main
from probes.holmes import load_benchmark
from dstg_interp.cli.holmes import main as holmes_main

torch.set_num_threads(1)
HOLMES = Path(__file__).resolve().parents[1] / "fixtures" / "holmes" / "benchmark"
AUTHORS = Path(__file__).resolve().parents[1] / "fixtures" / "authors-format"
# Specials in an order no code of ours assumes: [CLS]=4, [SEP]=3, [PAD]=2 (ours: 2, 3, 0).
HF_SPECIALS = ["[UNK]", "[MASK]", "[PAD]", "[SEP]", "[CLS]"]


pytestmark = pytest.mark.usefixtures("private_cache")  # DSTG_CACHE in the test's own folder (conftest)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = write_synthetic_corpus(tmp_path_factory.mktemp("corpus") / "docs", n_docs=12)
    return folder, load_corpus(str(folder), progress=False)


def hf_texts(documents) -> list[str]:
    datasets, _ = load_benchmark(HOLMES)
    texts = [s for d in datasets for row in d.rows for s in (row.sentences or ()) + (row.contexts or ())]
    return texts + [sentence for doc in documents for sentence in doc.sentences]


def save_hf_folder(folder: Path, kind: str, texts: list[str]) -> Path:
    """A tiny random transformers encoder and its WordPiece tokenizer, as save_pretrained writes them."""
    wordpiece = BertWordPieceTokenizer(lowercase=True)
    wordpiece.train_from_iterator(texts, vocab_size=150, special_tokens=HF_SPECIALS, show_progress=False)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=wordpiece._tokenizer, cls_token="[CLS]", sep_token="[SEP]",
                                        pad_token="[PAD]", mask_token="[MASK]", unk_token="[UNK]")
    vocab = wordpiece.get_vocab_size()
    torch.manual_seed(1234)  # not the seed random_init() uses, so the control differs from the model
    if kind == "bert":
        model = BertModel(BertConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=128, pad_token_id=2))
    else:
        model = DistilBertModel(DistilBertConfig(vocab_size=vocab, dim=32, n_layers=2, n_heads=4, hidden_dim=64,
                                                 max_position_embeddings=128, pad_token_id=2))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def hf_folders(tmp_path_factory, corpus):
    texts = hf_texts(corpus[1])
    root = tmp_path_factory.mktemp("hf")
    return {kind: save_hf_folder(root / kind, kind, texts) for kind in ("bert", "distilbert")}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, corpus):
    """A saved tiny DSTG checkpoint with a tokenizer trained on the corpus."""
    tokenizer = train_tokenizer(corpus[1], vocab_size=120)
    model = tiny_model("dstg", vocab_size=tokenizer.get_vocab_size(), max_positions=64)
    return model.save(tmp_path_factory.mktemp("ckpt") / "dstg", tokenizer=tokenizer)


def padded(seed: int = 0, vocab: int = 97):
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(5, vocab, (3, 12), generator=generator)
    mask = torch.ones(3, 12, dtype=torch.bool)
    mask[1, 9:], mask[2, 4:] = False, False
    return tokens.masked_fill(~mask, 0), mask


# --- our models: the same tensors as run_with_cache -------------------------------------------------
@pytest.mark.parametrize("variant", VARIANTS)
def test_states_are_run_with_cache_bit_for_bit(variant):
    model = tiny_model(variant).eval()
    encoder = open_encoder(model)
    assert isinstance(encoder, HookedEncoder) and encoder.model is model and encoder.name == variant
    assert encoder.layers == (0, 1, 2, FINAL)
    assert encoder.subspaces == (("ap", "sem", "full") if variant == "dstg" else ("full",))
    tokens, mask = padded()
    states = encoder.states(tokens, layers=encoder.layers, attention_mask=mask)
    assert set(states) == {(layer, s) for layer in encoder.layers for s in encoder.subspaces}
    # names_filter = the state hooks only: a hooked logit term would switch attention off its fused path
    names = sorted({h for layer, s in states for h in layer_hooks(variant, layer, s)}) + (
        ["hook_embed", "hook_pos_embed"] if variant == "ap" else [])
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, attention_mask=mask, names_filter=names)
    for (layer, subspace), got in states.items():
        want = torch.cat([cache[h] for h in layer_hooks(variant, layer, subspace)], dim=-1)
        assert got.dtype == torch.float32 and torch.equal(got, want), (layer, subspace)
    if variant == "ap":  # layer 0 is what the first block reads: token + position embedding
        assert torch.equal(states[(0, "full")], cache["hook_embed"] + cache["hook_pos_embed"])
    if variant == "dstg":
        assert states[(2, "full")].shape[-1] == 24 + 8
        assert torch.equal(states[(2, "full")][..., 24:], states[(2, "ap")])


def test_iter_states_batches_by_length_and_pads_with_the_tokenizers_pad():
    model = tiny_model("rp").eval()
    encoder = open_encoder(model)
    rng = np.random.default_rng(0)
    sequences = [list(rng.integers(5, 97, n)) for n in (5, 11, 3, 8, 11, 2, 7)]
    seen = []
    for batch in encoder.iter_states(sequences, layers=[1, FINAL], batch_size=3):
        lengths = [len(sequences[i]) for i in batch.indices]
        assert lengths == sorted(lengths, reverse=True)
        tokens, mask = encoder.pad([sequences[i] for i in batch.indices])
        assert torch.equal(mask, batch.attention_mask) and (tokens[~mask] == encoder.special.pad).all()
        with torch.no_grad():
            _, cache = model.run_with_cache(tokens, attention_mask=mask, names_filter=["blocks.0.hook_resid_post", "hook_final"])
        assert torch.equal(batch.states[(1, "full")], cache["blocks.0.hook_resid_post"])
        assert torch.equal(batch.states[(FINAL, "full")], cache["hook_final"])
        seen += batch.indices.tolist()
    assert sorted(seen) == list(range(len(sequences)))
    assert [len(b) for b in length_sorted_batches([len(s) for s in sequences], 3)] == [3, 3, 1]


def test_attention_terms_and_pattern_streamed_or_kept():
    model = tiny_model("dstg").eval()
    encoder = open_encoder(model)
    tokens, mask = padded()
    kept = encoder.attention(tokens, mask)
    assert sorted(kept) == [0, 1] and set(kept[1]) == {"sem", "ap", "rp", "pattern"}
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, attention_mask=mask, names_filter=lambda n: ".attn.hook_" in n)
    for layer in (0, 1):
        for term, hook in (("sem", "hook_logits_sem"), ("ap", "hook_logits_ap"), ("rp", "hook_logits_rp"),
                           ("pattern", "hook_pattern")):
            assert torch.equal(kept[layer][term], cache[f"blocks.{layer}.attn.{hook}"])
    streamed = {}
    encoder.attention(tokens, mask, layers=[1], on_layer=lambda layer, terms, pattern: streamed.update(
        {layer: (sorted(terms), pattern.clone())}))
    assert list(streamed) == [1] and streamed[1][0] == ["ap", "rp", "sem"]
    with torch.no_grad():  # block 0 unhooked stays on the fused kernel: compare with the same hooks
        _, cache = model.run_with_cache(tokens, attention_mask=mask, names_filter=lambda n: n.startswith("blocks.1.attn."))
    assert torch.equal(streamed[1][1], cache["blocks.1.attn.hook_pattern"])
    torch.testing.assert_close(streamed[1][1], kept[1]["pattern"])


@pytest.mark.parametrize("folder", ["posneobert-dstg", "posneobert-dstg-encoder", "posneobert-baseline-rp", "neobert-hf"])
def test_authors_folders_open_as_hooked_models_and_give_their_states(folder):
    """The authors' PosNeoBERT / NeoBERT folders (HF-style config.json) go to our classes, not the Auto classes,
    and the adapter's layer l is the authors' hidden_states[l - 1] ([AP | sem] in their order) at real tokens."""
    path = AUTHORS / folder
    encoder = open_encoder(path)
    assert isinstance(encoder, HookedEncoder) and encoder.name == folder  # the folder's own name (naming.py)
    ids = torch.from_numpy(np.load(AUTHORS / "inputs" / "input_ids_a.npy"))
    mask = torch.from_numpy(np.load(AUTHORS / "inputs" / "attention_mask_a.npy")).bool()
    reference = "posneobert-dstg" if folder == "posneobert-dstg-encoder" else folder  # same weights, no decoder
    theirs = np.load(AUTHORS / reference / "outputs" / "a" / "hidden_states.npy")  # [layer, batch, pos, d]
    layers = list(range(1, encoder.n_layers + 1))
    states = encoder.states(ids, layers, attention_mask=mask)
    for layer in layers:
        ours = states[(layer, "full")]
        if encoder.variant == "dstg":  # ours is [sem | ap]
            ours = torch.cat([states[(layer, "ap")], states[(layer, "sem")]], dim=-1)
        expected = theirs[layer - 1][mask.numpy()]
        error = np.abs(ours[mask].numpy() - expected).max() / np.abs(expected).max()
        assert error < 1e-4, (layer, error)


def test_open_encoder_never_moves_or_casts_the_callers_model(checkpoint):
    model = tiny_model("rope").eval()
    doubled = open_encoder(model, dtype=torch.float64)
    assert doubled.dtype == torch.float64 and next(model.parameters()).dtype == torch.float32
    assert open_encoder(doubled) is doubled and open_encoder(doubled, dtype=torch.float64) is doubled
    loaded = open_encoder(checkpoint)
    assert loaded.name == checkpoint.name and loaded.tokenizer is not None
    assert open_encoder("dstg").name == "dstg"  # a shipped zoo model keeps its zoo name
    assert open_encoder(model, name="mine").name == "mine"


def test_random_init_twins_keep_architecture_and_tokenizer(hf_folders, checkpoint):
    trained = open_encoder(checkpoint)
    with torch.no_grad():  # as if trained: away from the seeded init random_init() rebuilds
        for parameter in trained.model.parameters():
            parameter.add_(0.5)
    for encoder in (trained, open_encoder(hf_folders["bert"])):
        before = {k: v.clone() for k, v in encoder.model.state_dict().items()}
        twin = encoder.random_init()
        assert type(twin) is type(encoder) and twin.tokenizer is encoder.tokenizer and twin.special == encoder.special
        assert twin.model is not encoder.model and twin.config.to_dict() == encoder.config.to_dict()
        after = twin.model.state_dict()
        assert all(torch.equal(v, encoder.model.state_dict()[k]) for k, v in before.items())  # original untouched
        assert any(not torch.equal(after[k], v) for k, v in before.items() if v.dim() == 2)
        assert all(torch.equal(a, b) for a, b in zip(after.values(), encoder.random_init().model.state_dict().values()))


def test_special_tokens_come_from_the_tokenizer(hf_folders):
    encoder = open_encoder(hf_folders["bert"])
    assert (encoder.special.cls, encoder.special.sep, encoder.special.pad, encoder.special.mask) == (4, 3, 2, 1)
    roberta_like = BertWordPieceTokenizer()
    roberta_like.add_special_tokens(["<pad>", "<s>", "</s>", "<mask>"])
    ids = special_tokens(roberta_like)
    assert (ids.pad, ids.cls, ids.sep, ids.mask) == (0, 1, 2, 3)
    with pytest.raises(ValueError, match="no CLS token"):
        special_tokens(BertWordPieceTokenizer())


# --- HF encoders: the same tensors as output_hidden_states ------------------------------------------
@pytest.mark.parametrize("kind", ["bert", "distilbert"])
def test_hf_states_are_output_hidden_states_bit_for_bit(kind, hf_folders, corpus):
    folder = hf_folders[kind]
    encoder = open_encoder(folder)
    assert isinstance(encoder, HFEncoder) and encoder.kind == "hf" and encoder.name == folder.name
    assert encoder.layers == (0, 1, 2) and encoder.subspaces == ("full",) and encoder.variant == f"hf:{kind}"
    sequences = encoder.structured_sequences(corpus[1], max_length=40)
    assert (sequences.arrays["input_ids"][sequences.offsets[:-1]] == 4).all()  # this tokenizer's [CLS]
    assert (sequences.arrays["input_ids"][sequences.offsets[1:] - 1] == 3).all()
    reference = AutoModel.from_pretrained(str(folder)).eval()
    for batch in encoder.iter_states(sequences, layers=[0, 1, 2], batch_size=4):
        tokens, mask = encoder.pad([sequences[int(i)]["input_ids"] for i in batch.indices])
        assert (tokens[~mask] == 2).all()  # this tokenizer's [PAD]
        with torch.no_grad():
            hidden = reference(input_ids=tokens, attention_mask=mask.long(), output_hidden_states=True).hidden_states
        for layer in (0, 1, 2):
            assert torch.equal(batch.states[(layer, "full")], hidden[layer]), layer
    store = extract(encoder, corpus[1], corpus[0].parent / f"store-{kind}", max_length=40, dtype="float32",
                    progress=False)
    assert store.layers == (0, 1, 2) and store.manifest["identity"]["model"]["kind"] == "hf"
    patterns = encoder.attention(tokens, mask)
    assert set(patterns[1]) == {"pattern"} and patterns[1]["pattern"].shape == (len(tokens), 4) + tokens.shape[1:] * 2


def test_requests_the_model_cannot_serve_are_one_line_errors(hf_folders):
    rope, hf = open_encoder(tiny_model("rope")), open_encoder(hf_folders["bert"])
    tokens, mask = padded()
    with pytest.raises(EncoderError, match=r"subspace 'ap' does not exist in a 'rope' model .*: it has full"):
        rope.states(tokens, subspaces=["ap"], attention_mask=mask)
    with pytest.raises(EncoderError, match=r"layer 3 does not exist in .*: it has layers 0..2"):
        rope.states(tokens, layers=[3], attention_mask=mask)
    with pytest.raises(EncoderError, match=r"layer 'final' does not exist in .*: it has layers 0..\d+ \(0 = embeddings\)$"):
        hf.states(tokens, layers=[FINAL], attention_mask=mask)
    with pytest.raises(EncoderError, match="logit-term hooks"):
        hf.capture(tokens, mask, ["hidden_states.1"], on_attention=lambda *a: None)
    with pytest.raises(EncoderError, match="without an MLM head"):
        hf.mlm_logits(tokens, mask)
    with pytest.raises(EncoderError, match="cannot encode with a dict"):
        open_encoder({})


# --- every CLI takes a zoo name, our checkpoint folder and an HF folder ----------------------------
def test_dstg_probe_holmes_on_an_hf_folder(hf_folders, tmp_path, capsys):
    code = probe_main(["--model", str(hf_folders["bert"]), "--task", "holmes", "--benchmark", str(HOLMES),
                       "--out", str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 0, err
    results = pd.read_csv(tmp_path / "o" / "results.csv")
    # an HF folder without a model card is named by its own name (dstg_interp.encoders.naming)
    assert set(results.subspace) == {"full"} and set(results.model) == {"bert"}
    assert {"fx-sentence", "fx-pair-tokens-cross", "fx-spans"} <= set(results.dataset)


def test_dstg_holmes_takes_a_checkpoint_and_an_hf_folder(hf_folders, checkpoint, tmp_path, capsys):
    code = holmes_main(["run", "--holmes-dir", str(HOLMES), "--model", str(checkpoint), "--model",
                        str(hf_folders["distilbert"]), "--seeds", "0", "--out", str(tmp_path / "o")])
    assert code == 0, capsys.readouterr().err
    results = pd.read_csv(tmp_path / "o" / "results.csv")
    assert set(results.model) == {checkpoint.name, hf_folders["distilbert"].name}  # their own names (naming.py)


@pytest.mark.parametrize("kind", ["zoo", "checkpoint", "hf"])
def test_dstg_cache_takes_every_kind_of_model(kind, hf_folders, checkpoint, corpus, tmp_path, capsys):
    model = {"zoo": "rp", "checkpoint": str(checkpoint), "hf": str(hf_folders["bert"])}[kind]
    code = cache_main(["--model", model, "--corpus", str(corpus[0]), "--max-docs", "3", "--max-length", "32",
                       "--layers", "0,1", "--out", str(tmp_path / "store"), "--quiet"])
    assert code == 0, capsys.readouterr().err
    assert (tmp_path / "store" / "manifest.json").is_file()


def test_a_missing_attention_block_is_one_line_naming_those_that_exist():
    encoder = open_encoder(tiny_model("dstg").eval())
    blocks = encoder.attention(torch.tensor([[2, 7, 8, 3]]))
    with pytest.raises(KeyError, match=r"no attention block 5: its blocks are 0\.\.1") as caught:
        blocks[5]
    assert isinstance(caught.value, EncoderError) and "\n" not in str(caught.value)
