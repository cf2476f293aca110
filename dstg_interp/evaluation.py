"""Masked-token evaluation on held-out documents of any corpus, against the no-context baseline.

    dstg-eval --model dstg rope ap rp --corpus en-mix pydocs --n-docs 200      # dstg_interp/cli/eval.py
    dstg-eval --model runs/dstg/checkpoint --corpus docs.jsonl --out results/mlm.csv

    from dstg_interp import load_model
    from dstg_interp.evaluation import mlm_accuracy
    mlm_accuracy(load_model("dstg"), "pydocs", n_docs=200)
    # {'loss': ..., 'accuracy': ..., 'most_frequent_accuracy': ..., 'unigram_loss': ..., 'n_tokens': ..., 'n_docs': ..., 'split': 'all', 'masks': ...}
    mlm_accuracy(open_encoder("path/to/bert-folder", mlm_head=True), "pydocs", n_docs=200, max_length=128)

Documents: on the model's own training corpus (or a piece of en-mix for an en-mix model), its held-out
validation split (the one its ``train_config.json`` names: val_fraction, data_seed), so no evaluated
document was trained on; on any other corpus (e.g. ``pydocs``), all of its documents.  ``n_docs`` of them are chosen
by a seeded sha256 of their ids, so the choice does not depend on the corpus's order or on the model.
Each document becomes [CLS] ... [SEP] sequences of at most ``max_length`` tokens (windows, so every token
of a long document is used).  Sequence i is masked (20% of its tokens, all -> [MASK], as in training)
by a generator seeded from (seed, i) alone: models with the same tokenizer (the whole zoo) are scored on
the same masked tokens, whatever the batch size.  ``masks`` in the result is a fingerprint of those
masked positions (sequence lengths and masked offsets): equal fingerprints, identical masks.

Hugging Face masked-LMs (``open_encoder(path_or_hub_id, mlm_head=True)``, ``AutoModelForMaskedLM``) go the
same way: the same documents, the same windows and the same rule and seed, applied to the sequences their
own tokenizer gives, with their own [MASK] and padding ids.  A folder that shares the zoo's tokenizer gets
exactly the zoo's masks; one with another tokenizer cuts the text into other tokens, so its masks (and its
fingerprint) differ, and the command line says so.  An HF model has no training record here, so its
unigram baseline is left empty (NaN) unless ``train_config=`` or ``unigram=`` gives one.

Baseline, on the same masked tokens: the add-one-smoothed unigram distribution of the model's training
split, as tokenized by the model's own tokenizer (``unigram_loss``), and always guessing its most
frequent token (``most_frequent_accuracy``).  ``accuracy - most_frequent_accuracy`` is what context buys.
Bad input on the command line: one line on stderr, exit code 2, nothing written.
"""

from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from dstg_interp.config import step_seed
from dstg_interp.data import IGNORE_INDEX, PAD_ID, build_structured_sequences, collate, load_corpus, mask_tokens
from dstg_interp.data.corpora import Document, split_documents
from dstg_interp.data.mlm import pad_batch
from dstg_interp.data.structure import StructuredSequences
from dstg_interp.data.tokenizer import tokenizer_hash
from dstg_interp.encoders import Encoder, EncoderError
from dstg_interp.encoders.inputs import TOOLKIT_SPECIAL_TOKENS, SpecialTokens
from dstg_interp.train import CONFIG_FILE, TrainConfig, prepare_training_data, read_train_config

MASK_PROB = 0.2  # NeoBERT's training rate; fixed (not read from each model) so all models share masks
# Below this many documents an accuracy is said to rest on them alone (the probes' rule for intervals).
MIN_EVAL_DOCUMENTS = 10


class SmallEvaluationWarning(UserWarning):
    """An accuracy measured on fewer than MIN_EVAL_DOCUMENTS documents."""
RESULT_COLUMNS = ["model", "corpus", "split", "n_docs", "n_tokens", "loss", "unigram_loss", "accuracy",
                  "most_frequent_accuracy", "accuracy_gain"]


# --------------------------------------------------------------------------- the unigram baseline

@dataclass
class Unigram:
    """Add-one-smoothed token frequencies of a training split: the prediction with no context."""

    counts: np.ndarray  # [vocab] float64, every count + 1

    @classmethod
    def from_sequences(cls, sequences: StructuredSequences, vocab_size: int) -> "Unigram":
        ids = sequences.arrays["input_ids"][~sequences.arrays["is_special"]]
        return cls(np.bincount(ids, minlength=vocab_size).astype(np.float64) + 1.0)

    @property
    def log_probs(self) -> np.ndarray:
        return np.log(self.counts / self.counts.sum())

    @property
    def most_frequent(self) -> int:
        return int(self.counts.argmax())

    def score(self, targets: np.ndarray) -> tuple[float, int]:
        """(summed negative log-likelihood, number of targets equal to the most frequent token)."""
        return float(-self.log_probs[targets].sum()), int((targets == self.most_frequent).sum())


def training_config(model) -> TrainConfig | None:
    """The ``train_config.json`` saved beside the model's checkpoint (the zoo ships one), if any."""
    path = getattr(model, "checkpoint_path", None)
    if path is None or not (Path(path) / CONFIG_FILE).is_file():
        return None
    return read_train_config(Path(path) / CONFIG_FILE)


def training_unigram(model, cfg: TrainConfig, cache_dir: str | Path | None = None) -> Unigram:
    """Token frequencies of the split the model trained on, in the model's own token ids: the training data
    is prepared with the model's tokenizer (the cached entry that trained it, else one keyed on it), so a
    cache prepared by another run can never put the baseline in other ids."""
    if model.tokenizer is None:
        raise ValueError(f"{getattr(model, 'checkpoint_path', 'the model')}: has no tokenizer, so its training data "
                         "cannot be tokenized as it was; put its tokenizer.json beside the checkpoint")
    prepared = prepare_training_data(cfg, cache_dir=cache_dir, tokenizer=model.tokenizer)
    if tokenizer_hash(prepared.tokenizer) != tokenizer_hash(model.tokenizer):  # prepare_data's own promise
        raise ValueError(f"the prepared training data in {prepared.directory} is not in the model's token ids; "
                         f"remove {prepared.directory} and run again")
    return Unigram.from_sequences(prepared.train, model.config.vocab_size)


# --------------------------------------------------------------------------- documents and masks

def select_documents(documents: list[Document], n_docs: int, seed: int) -> list[Document]:
    """``n_docs`` documents chosen by a seeded hash of their ids (stable under reordering), in input order."""
    def rank(doc: Document) -> bytes:
        return hashlib.sha256(f"mlm-eval:{seed}:{doc.doc_id}".encode()).digest()

    chosen = {id(doc) for doc in sorted(documents, key=rank)[:n_docs]}
    return [doc for doc in documents if id(doc) in chosen]


def shares_training_documents(corpus: str, cfg: TrainConfig | None) -> bool:
    """Could ``corpus`` hold documents the model trained on?  The same spec or path, or any piece subset of
    en-mix for an en-mix model (the split hashes each document id, so a subset splits the same way)."""
    if cfg is None:
        return False
    if corpus == cfg.corpus or (corpus.startswith("en-mix") and cfg.corpus.startswith("en-mix")):
        return True
    return Path(corpus).exists() and Path(cfg.corpus).exists() and Path(corpus).resolve() == Path(cfg.corpus).resolve()


def evaluation_documents(corpus: str, cfg: TrainConfig | None, documents: list[Document] | None = None,
                         cache_dir: str | Path | None = None) -> tuple[list[Document], str]:
    """(documents, split): the validation split of the model's training corpus, else the whole corpus.
    The split is taken over all documents, even if training kept only the first ``max_docs``: a
    validation-hashed document was never trained on either way."""
    if documents is None:
        documents = load_corpus(corpus, cache_dir=cache_dir, progress=False)
    if not shares_training_documents(corpus, cfg):
        return documents, "all"
    _, held_out = split_documents(documents, val_fraction=cfg.val_fraction, seed=cfg.data_seed)
    return held_out, "validation"


def masked_sequences(sequences: StructuredSequences, seed: int, mask_prob: float = MASK_PROB,
                     special: SpecialTokens = TOOLKIT_SPECIAL_TOKENS) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(masked ids, labels) per sequence, each from a generator seeded by (seed, sequence index) only;
    ``special``: the tokenizer's ids, never masked ([MASK] the one masked tokens become)."""
    masked = []
    for index in range(len(sequences)):
        ids, _, is_special = collate([sequences[index]["input_ids"]], special.pad, special.ids)
        generator = torch.Generator().manual_seed(step_seed(seed, index))
        corrupted, labels = mask_tokens(ids, is_special, generator, mask_prob=mask_prob, mask_token_id=special.mask)
        masked.append((corrupted[0], labels[0]))
    return masked


def mask_fingerprint(rows: list[tuple[torch.Tensor, torch.Tensor]]) -> str:
    """12 hex digits over every sequence's length and masked offsets: equal for identical masks."""
    digest = hashlib.sha256()
    for _, labels in rows:
        digest.update(f"{len(labels)}:{(labels != IGNORE_INDEX).nonzero().flatten().tolist()};".encode())
    return digest.hexdigest()[:12]


def padded_batch(rows: list[tuple[torch.Tensor, torch.Tensor]], pad_id: int = PAD_ID):
    """Right-pad (ids, labels) rows: ids with ``pad_id``, labels with IGNORE_INDEX; mask True on real tokens."""
    ids, attention_mask = pad_batch([row_ids for row_ids, _ in rows], pad_id)
    labels, _ = pad_batch([row_labels for _, row_labels in rows], IGNORE_INDEX)
    return ids, attention_mask, labels


# --------------------------------------------------------------------------- the measurement

@torch.no_grad()
def mlm_accuracy(model, corpus: str, n_docs: int = 200, max_length: int | None = None, seed: int = 0, *,
                 batch_size: int = 32, train_config: TrainConfig | None = None, unigram: Unigram | None = None,
                 documents: list[Document] | None = None, cache_dir: str | Path | None = None) -> dict:
    """Masked-token loss and accuracy of ``model`` on ``n_docs`` held-out documents of ``corpus``, with the
    unigram baseline on the same masked tokens (see the module docstring).

    ``model``: one of ours (``load_model``), or an Encoder with an MLM head (``open_encoder(..., mlm_head=True)``:
    ours, or a Hugging Face masked-LM).

    ``max_length``: default, the model's training length (else its ``max_positions``).  ``train_config``:
    default, the one beside the checkpoint; it decides the held-out split and the training frequencies.
    ``unigram``: training frequencies, if already computed.  ``documents``: the corpus, if already loaded.
    """
    if not isinstance(n_docs, int) or n_docs <= 0:
        raise ValueError(f"n_docs must be a positive integer, got {n_docs!r}")
    if isinstance(model, Encoder) and model.kind != "hf":
        model = model.model  # one of ours behind hook points: its own forward, as for load_model
    encoder = model if isinstance(model, Encoder) else None
    if encoder is not None and (encoder.special.mask is None or not getattr(encoder, "has_mlm_head", False)):
        raise EncoderError(f"{encoder.name}: loaded without a masked-LM head or [MASK] token; open it with "
                           "open_encoder(path, mlm_head=True)")
    if getattr(model, "tokenizer", None) is None:
        raise ValueError("the model has no tokenizer; load it with load_model(path, tokenizer=FILE)")
    cfg = train_config if train_config is not None else training_config(model)
    if max_length is None:
        max_length = cfg.max_length if cfg is not None else model.config.max_positions
    if not 3 <= max_length <= model.config.max_positions:
        raise ValueError(f"max_length must be in [3, max_positions={model.config.max_positions}], got {max_length}")
    if unigram is None and encoder is None:
        if cfg is None:
            raise ValueError("the model has no train_config.json beside it, so its training split (held-out "
                             "documents, token frequencies) is unknown; pass train_config= or unigram=")
        unigram = training_unigram(model, cfg, cache_dir)
    elif unigram is None and cfg is not None:
        unigram = training_unigram(encoder, cfg, cache_dir)

    held_out, split = evaluation_documents(corpus, cfg, documents, cache_dir)
    chosen = select_documents(held_out, n_docs, seed)
    if not chosen:
        raise ValueError(f"corpus {corpus!r}: no held-out documents to evaluate on")
    if encoder is None:
        sequences = build_structured_sequences(chosen, model.tokenizer, max_length=max_length, windows=True,
                                               corpus_spec=corpus)
        special = TOOLKIT_SPECIAL_TOKENS
        model.eval()
    else:  # the same documents and windows in the encoder's own token ids, [CLS] / [SEP] / [PAD] / [MASK]
        sequences = encoder.structured_sequences(chosen, max_length=max_length, windows=True, corpus_spec=corpus)
        special = encoder.special
    rows = masked_sequences(sequences, seed, special=special)
    loss_sum, correct, unigram_nll, most_frequent_correct, n_tokens = _score_masked(
        rows, model if encoder is None else encoder, special.pad, batch_size, unigram)
    if len(chosen) < MIN_EVAL_DOCUMENTS:
        warnings.warn(f"{corpus}: only {len(chosen)} document(s) ({n_tokens} masked tokens); the accuracy rests on them "
                      f"alone (a comparison needs at least {MIN_EVAL_DOCUMENTS}): add documents before reading "
                      "differences between models", SmallEvaluationWarning, stacklevel=2)
    no_baseline = unigram is None  # an HF model with no training record: no training frequencies to compare with
    return dict(loss=loss_sum / n_tokens, accuracy=correct / n_tokens,
                most_frequent_accuracy=float("nan") if no_baseline else most_frequent_correct / n_tokens,
                unigram_loss=float("nan") if no_baseline else unigram_nll / n_tokens, n_tokens=n_tokens,
                n_docs=len(chosen), split=split, masks=mask_fingerprint(rows))


def _score_masked(rows, model, pad: int, batch_size: int, unigram: Unigram | None) -> tuple:
    """(summed loss, correct, summed unigram NLL, most-frequent-token hits, masked tokens) of ``model`` -- one of
    ours (its own forward, logits at the masked positions only) or an Encoder -- over the masked ``rows``."""
    encoder = model if isinstance(model, Encoder) else None
    device = None if encoder is not None else next(model.parameters()).device
    loss_sum, correct, unigram_nll, most_frequent_correct, n_tokens = 0.0, 0, 0.0, 0, 0
    for start in range(0, len(rows), batch_size):
        ids, attention_mask, labels = padded_batch(rows[start:start + batch_size], pad)
        selected = labels != IGNORE_INDEX
        targets = labels[selected]
        if encoder is None:
            output = model(ids.to(device), attention_mask.to(device), labels.to(device), masked_logits_only=True)
            logits = output.logits.float().cpu()
        else:
            logits = encoder.mlm_logits(ids, attention_mask).float().cpu()[selected]
        loss_sum += float(F.cross_entropy(logits, targets, reduction="sum"))
        correct += int((logits.argmax(-1) == targets).sum())
        if unigram is not None:
            nll, hits = unigram.score(targets.numpy())
            unigram_nll, most_frequent_correct = unigram_nll + nll, most_frequent_correct + hits
        n_tokens += len(targets)
    return loss_sum, correct, unigram_nll, most_frequent_correct, n_tokens


# --------------------------------------------------------------------------- the table

def results_table(rows: list[dict]) -> pd.DataFrame:
    table = pd.DataFrame(rows)
    table["accuracy_gain"] = table["accuracy"] - table["most_frequent_accuracy"]
    return table[RESULT_COLUMNS]
