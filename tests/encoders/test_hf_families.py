"""Any encoder read right: position ids derived from the model itself, for HF families that count positions
from a row other than 0 (RoBERTa's fairseq heritage: ``padding_idx + 1``; Nystromformer: two reserved rows).

Each tiny random folder (1 layer, d=32, a 40-row position table, pad id 1 as in the published checkpoints)
is saved the way the Hub ships it and opened through ``load_hf_encoder``; ``ap_table``, ``max_positions``
and the length cap must follow the rows the model's own forward reads.
"""

import pytest
import torch
import transformers
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

from dstg_interp import EncoderError, extract, load_hf_encoder
from dstg_interp.encoders import HFEncoder
from dstg_interp.evaluation import mlm_accuracy
from dstg_interp.encoders.hf import NOT_A_PATTERN
from dstg_interp.cli.entry import launch
from dstg_interp.tiny_zoo import tiny_documents

torch.set_num_threads(1)
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # RoBERTa's order: <pad> = 1
TABLE_ROWS = 40

# family -> (config class, first row a sequence reads, positions a sequence may use)
FAMILIES = {
    "mpnet": ("MPNetConfig", 2, 38),  # MPNet hard-codes padding_idx = 1
    "data2vec-text": ("Data2VecTextConfig", 2, 38),
    "roberta-prelayernorm": ("RobertaPreLayerNormConfig", 2, 38),
    "xlm-roberta": ("XLMRobertaConfig", 2, 38),
    "nystromformer": ("NystromformerConfig", 2, 40),  # max_position_embeddings + 2 rows, ids from 2
    "bert": ("BertConfig", 0, 40),  # the plain case, for contrast
}


def write_folder(folder, config_class: str, documents, auto=transformers.AutoModel, **extra) -> None:
    tokenizer = Tokenizer(models.WordPiece(unk_token="<unk>"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.train_from_iterator((d.text for d in documents), trainers.WordPieceTrainer(vocab_size=90,
                                                                                          special_tokens=SPECIALS))
    options = dict(vocab_size=tokenizer.get_vocab_size(), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                   intermediate_size=64, max_position_embeddings=TABLE_ROWS, pad_token_id=1, bos_token_id=0,
                   eos_token_id=2, **extra)
    torch.manual_seed(0)
    auto.from_config(getattr(transformers, config_class)(**options)).eval().save_pretrained(folder)
    tokenizer.save(str(folder / "tokenizer.json"))


@pytest.fixture(scope="module")
def documents():
    return tiny_documents(n_docs=6, seed=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_position_rows_follow_the_model(family, documents, tmp_path):
    config_class, first_row, positions = FAMILIES[family]
    write_folder(tmp_path / family, config_class, documents)
    encoder = load_hf_encoder(tmp_path / family)
    table = encoder.model.embeddings.position_embeddings.weight
    assert encoder.position_offset == first_row and encoder.max_positions == positions
    assert encoder.ap_table.shape == (positions, 32) and torch.equal(encoder.ap_table[0], table[first_row])

    # the length cap: asking for far more than the table holds gives sequences of exactly max_positions
    # tokens, and the model reads them without an index error
    store = extract(encoder, documents, tmp_path / "store", max_length=1024, dtype="float32", progress=False)
    longest = int(store.labels.groupby("sequence").size().max())
    assert longest == positions
    assert store.states(1).shape[0] == store.n_tokens


def test_dstg_cache_at_the_length_cap_is_not_a_traceback(documents, tmp_path, capsys):
    write_folder(tmp_path / "mpnet", "MPNetConfig", documents)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i, document in enumerate(documents):
        (corpus / f"{i}.txt").write_text(document.text)
    rc = launch("dstg-cache", ["--model", str(tmp_path / "mpnet"), "--corpus", str(corpus), "--out",
                               str(tmp_path / "store"), "--max-length", "1024", "--quiet"])
    assert rc == 0, capsys.readouterr().err
    assert "Traceback" not in capsys.readouterr().err


def test_non_softmax_attention_is_labelled_not_called_a_pattern(documents, tmp_path):
    # SqueezeBERT returns its pre-softmax scores as "attentions": rows do not sum to 1
    write_folder(tmp_path / "squeezebert", "SqueezeBertConfig", documents, embedding_size=32, q_groups=1, k_groups=1,
                 v_groups=1, post_attention_groups=1, intermediate_groups=1, output_groups=1)
    encoder = load_hf_encoder(tmp_path / "squeezebert")
    tokens = torch.tensor([[0, 7, 8, 9, 2]])
    assert set(encoder.attention(tokens)[0]) == {NOT_A_PATTERN}

    write_folder(tmp_path / "bert", "BertConfig", documents)
    assert set(load_hf_encoder(tmp_path / "bert").attention(tokens)[0]) == {"pattern"}


def test_a_position_scheme_that_cannot_be_derived_is_one_clear_error(documents, tmp_path):
    """A model whose 5-token forward reads position rows out of order (here: BERT's position_ids buffer
    reversed) is refused with one line, never read with a guessed offset."""
    write_folder(tmp_path / "bert", "BertConfig", documents)
    encoder = load_hf_encoder(tmp_path / "bert")
    model = encoder.model
    model.embeddings.position_ids.copy_(model.embeddings.position_ids.flip(-1))
    with pytest.raises(EncoderError, match=r"cannot derive its position scheme: a 5-token input read position rows "
                                           r"\[39, 38, 37, 36, 35\]") as error:
        HFEncoder(model, encoder.tokenizer, tmp_path / "bert")
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("config_class", ["XLMRobertaConfig", "MPNetConfig"])
def test_a_roberta_style_masked_lm_is_masked_with_its_own_ids(config_class, documents, tmp_path):
    """dstg-eval's path on the fairseq layout (<s>=0, <pad>=1, </s>=2, <mask>=4): masked tokens become <mask>,
    padding is <pad>, and the measurement does not depend on how sequences are batched."""
    write_folder(tmp_path / "mlm", config_class, documents, auto=transformers.AutoModelForMaskedLM)
    encoder = load_hf_encoder(tmp_path / "mlm", mlm_head=True)
    assert encoder.special.to_dict() == {"cls": 0, "sep": 2, "pad": 1, "mask": 4} and encoder.position_offset == 2
    seen, mlm_logits = [], encoder.mlm_logits

    def record(ids, attention_mask):
        seen.append((ids.clone(), attention_mask.clone()))
        return mlm_logits(ids, attention_mask)

    encoder.mlm_logits = record
    one = mlm_accuracy(encoder, "tiny", n_docs=6, max_length=24, documents=documents, batch_size=1)
    many = mlm_accuracy(encoder, "tiny", n_docs=6, max_length=24, documents=documents, batch_size=5)
    assert one["masks"] == many["masks"] and one["n_tokens"] == many["n_tokens"]
    assert one["loss"] == pytest.approx(many["loss"], rel=1e-5) and one["accuracy"] == many["accuracy"]
    ids, mask = seen[-1]
    assert (ids[~mask] == 1).all() and (~mask).any()  # right-padded with <pad>
    assert (ids == 4).any() and (ids[:, 0] == 0).all()  # <mask> shown, <s> first
