"""Position-free semantic states: how much a passage's states move when only its offset or its context changes.

    from dstg_interp import load_model
    from dstg_interp.data import probing_documents
    from dstg_interp.analysis.invariance import measure_invariance, select_passages

    model = load_model("dstg")
    passages = select_passages(probing_documents("en-mix"), model.tokenizer, n_passages=400, seed=0)
    invariance, retrieval = measure_invariance(model, passages, name="dstg", seed=0)
    invariance.query("layer == 4 and condition == 'shift'")[["subspace", "token_cosine", "token_rel_l2"]]

The question (one of the paper's proposed uses): can a passage be encoded once, alone, and its encoding be reused
wherever the passage later appears?  A passage is a run of whole consecutive sentences of one document
(``select_passages``).  Each passage is encoded five ways (``build_encodings``), all with the same offset
``o`` (its in-context offset: the preceding tokens of its document, capped so every input fits):

    alone     [CLS] passage [SEP]                                 the cached encoding, at offset 0
    shift     o masked pads, then [CLS] passage [SEP]             only the absolute positions move (by o)
    prefix    [CLS] o tokens of another document, passage [SEP]   unrelated text before it
    inside    [CLS] the same o tokens, passage, that document's next tokens (as many as context has
              after the passage), [SEP]                           embedded inside another document
    context   [CLS] its own o preceding tokens, passage, its following tokens up to max_positions, [SEP]

``shift`` changes nothing a relative-only model (rope, rp) can see, so there the metric must say
"identical" (up to rounding): a built-in check of the measurement.

Tables (one row per measurement, ``measure_invariance``):

    invariance  model, variant, subspace, condition, layer, n_passages, mean_offset,
                token_cosine, token_rel_l2     mean over passages of the mean over passage tokens (not
                                               [CLS]/[SEP]) of cos(x_cond, x_alone) and |x_cond - x_alone| / |x_alone|
                pooled_cosine, pooled_rel_l2   the same two on the mean-pooled passage vector
    retrieval   model, variant, subspace, condition, layer, k, recall, n_passages
                database = pooled ``alone`` vectors of all passages, queries = pooled vectors of
                ``condition``; cosine nearest neighbour; recall@k = share of queries whose own passage
                ranks in the top k (ties counted in the query's favour)

The model runs through ``dstg_interp.encoders`` (anything ``open_encoder`` takes, HF encoders included),
whose tokenizer names [CLS]/[SEP]/[PAD]. Layers and subspaces follow its hook table: layer 0 = embeddings,
layer l = after block l-1 (``"final"`` = the normed state the MLM head reads); DSTG has ``sem``, ``ap``
and ``full`` = [sem, ap], the baselines ``full`` only.  Cosines are on raw states, which share a large common direction in trained
encoders, so ``token_rel_l2`` is the more telling number.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from dstg_interp.progress import progress_bar

from ..encoders import Encoder, SpecialTokens, open_encoder
from ..encoders.inputs import TOOLKIT_SPECIAL_TOKENS

CONDITIONS = ("shift", "prefix", "inside", "context")
ALONE = "alone"
KS = (1, 5, 10)
INVARIANCE_COLUMNS = ["model", "variant", "subspace", "condition", "layer", "n_passages", "mean_offset",
                      "token_cosine", "token_rel_l2", "pooled_cosine", "pooled_rel_l2"]
RETRIEVAL_COLUMNS = ["model", "variant", "subspace", "condition", "layer", "k", "recall", "n_passages"]


@dataclass
class Passage:
    """A run of whole sentences of one document, in token ids (no special tokens), with its surroundings."""

    doc_id: str
    first_sentence: int  # index into Document.sentences
    n_sentences: int
    tokens: list[int]
    preceding: list[int]  # every token of the document before the passage
    following: list[int]  # every token of the document after it

    @property
    def document_tokens(self) -> list[int]:
        return self.preceding + self.tokens + self.following


@dataclass
class Encoding:
    """One model input: ``pad`` masked positions, then ``tokens`` (specials included); the passage
    occupies input positions ``pad + start`` .. ``pad + start + len(passage) - 1``."""

    tokens: list[int]
    pad: int
    start: int


def select_passages(documents, tokenizer, n_passages: int | None = None, *, min_tokens: int = 16,
                    max_tokens: int = 48, min_context: int = 24, per_document: int = 1, seed: int = 0) -> list[Passage]:
    """Passages of ``min_tokens``..``max_tokens`` tokens with at least ``min_context`` tokens of the same
    document before them; at most ``per_document`` (non-overlapping) per document, chosen with ``seed``;
    ``n_passages`` of them drawn with ``seed`` (None = all found), in document order."""
    if not 1 <= min_tokens <= max_tokens:
        raise ValueError(f"select_passages: need 1 <= min_tokens <= max_tokens, got {min_tokens} and {max_tokens}")
    if min_context < 1 or per_document < 1:
        raise ValueError(f"select_passages: min_context and per_document must be >= 1, "
                         f"got {min_context} and {per_document}")
    documents = list(documents)
    sentences = [sentence for document in documents for sentence in document.sentences]
    if not sentences:
        raise ValueError("select_passages: the documents hold no sentences; pass a non-empty list of Documents")
    ids = [encoding.ids for encoding in tokenizer.encode_batch(sentences, add_special_tokens=False)]
    rng = np.random.default_rng(seed)
    passages, cursor = [], 0
    for document in documents:
        doc_sentences = ids[cursor:cursor + len(document.sentences)]
        cursor += len(document.sentences)
        bounds = np.concatenate([[0], np.cumsum([len(s) for s in doc_sentences])]).astype(int)
        candidates = [(i, j) for i in range(len(doc_sentences)) if bounds[i] >= min_context
                      for j in range(i + 1, len(doc_sentences) + 1)
                      if min_tokens <= bounds[j] - bounds[i] <= max_tokens]
        taken: list[tuple[int, int]] = []
        for index in rng.permutation(len(candidates)):
            i, j = candidates[index]
            if len(taken) < per_document and all(j <= a or i >= b for a, b in taken):
                taken.append((i, j))
        flat = [token for sentence in doc_sentences for token in sentence]
        for i, j in sorted(taken):
            passages.append(Passage(document.doc_id, i, j - i, flat[bounds[i]:bounds[j]], flat[:bounds[i]],
                                    flat[bounds[j]:]))
    wanted = len(passages) if n_passages is None else n_passages
    if len(passages) < max(wanted, 2):
        raise ValueError(f"select_passages: found {len(passages)} passages of {min_tokens}-{max_tokens} tokens with "
                         f">= {min_context} tokens of context in {len(documents)} documents, need {max(wanted, 2)}; "
                         "pass more documents, a smaller n_passages or a larger per_document")
    chosen = np.sort(rng.choice(len(passages), size=wanted, replace=False))
    return [passages[i] for i in chosen]


def build_encodings(passages: list[Passage], max_positions: int, *, offset: int | None = None,
                    seed: int = 0, special: SpecialTokens = TOOLKIT_SPECIAL_TOKENS) -> list[dict[str, Encoding]]:
    """The ``alone``, ``shift``, ``prefix`` and ``context`` inputs of every passage (module docstring).

    offset: None = each passage's in-context offset (its preceding tokens, capped so that every input fits
    in ``max_positions``); an int = that offset for every passage.  ``prefix`` text comes from the documents
    of the other passages, drawn with ``seed``.  special: the model's [CLS]/[SEP] ids (``encoder.special``)."""
    cls_id, sep_id = special.cls, special.sep
    if len(passages) < 2:
        raise ValueError(f"build_encodings: need at least 2 passages, got {len(passages)}")
    documents = {p.doc_id: p.document_tokens for p in passages}
    if len(documents) < 2:
        raise ValueError("build_encodings: the prefix condition needs text from another document, but every "
                         "passage comes from one document; select passages from more documents")
    doc_ids = list(documents)
    rng = np.random.default_rng(seed)
    encodings = []
    for number, passage in enumerate(passages):
        length = len(passage.tokens)
        room = max_positions - 2 - length
        where = f"passage {number} ({passage.doc_id}, {length} tokens)"
        if offset is None:
            o = min(len(passage.preceding), room)
        elif offset > len(passage.preceding):
            raise ValueError(f"{where} has only {len(passage.preceding)} tokens of context, fewer than "
                             f"offset={offset}; pass a smaller offset or select passages with min_context >= offset")
        else:
            o = offset
        if o > room or o < 1:
            raise ValueError(f"{where}: offset {o} + passage + [CLS]/[SEP] = {o + length + 2} positions, the model has "
                             f"{max_positions}; select shorter passages (max_tokens) or pass a smaller offset")
        following = passage.following[:room - o]
        needed = o + len(following)  # foreign text before (prefix, inside) and after (inside) the passage
        donor: list[int] = []
        for doc_id in rng.permutation(doc_ids):  # another document's opening text, more if it is too short
            if doc_id != passage.doc_id and len(donor) < needed:
                donor += documents[doc_id][:needed - len(donor)]
        if len(donor) < o:
            raise ValueError(f"{where}: the other documents hold {len(donor)} tokens, the prefix needs {o}")
        alone = [cls_id] + passage.tokens + [sep_id]
        encodings.append({
            ALONE: Encoding(alone, 0, 1),
            "shift": Encoding(alone, o, 1),
            "prefix": Encoding([cls_id] + donor[:o] + passage.tokens + [sep_id], 0, 1 + o),
            "inside": Encoding([cls_id] + donor[:o] + passage.tokens + donor[o:needed] + [sep_id], 0, 1 + o),
            "context": Encoding([cls_id] + passage.preceding[-o:] + passage.tokens + following + [sep_id], 0, 1 + o),
        })
    return encodings


def retrieval_ranks(queries: np.ndarray, database: np.ndarray) -> np.ndarray:
    """Rank (0 = first) of database row i among all rows by cosine similarity to query row i; rows tied
    with it do not push it down."""
    if queries.shape != database.shape or queries.ndim != 2:
        raise ValueError(f"retrieval_ranks: queries {queries.shape} and database {database.shape} "
                         "must have one same shape [n, d]")
    q = queries / np.linalg.norm(queries, axis=1, keepdims=True).clip(min=1e-300)
    d = database / np.linalg.norm(database, axis=1, keepdims=True).clip(min=1e-300)
    similarity = q @ d.T
    own = np.einsum("ij,ij->i", q, d)  # the same numbers as the diagonal, computed once per row
    return (similarity > own[:, None] + 1e-12).sum(axis=1)


def recall_at_k(queries: np.ndarray, database: np.ndarray, ks=KS) -> dict[int, float]:
    """{k: share of queries i whose database row i is among the k nearest (cosine)}."""
    ranks = retrieval_ranks(np.asarray(queries, dtype=np.float64), np.asarray(database, dtype=np.float64))
    return {int(k): float(np.mean(ranks < k)) for k in ks}


def measure_invariance(model, passages: list[Passage], *, name: str | None = None, layers=None, subspaces=None,
                       conditions=CONDITIONS, offset: int | None = None, max_positions: int | None = None,
                       seed: int = 0, batch_size: int = 32, dtype: torch.dtype | None = torch.float32, ks=KS,
                       progress: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The invariance and retrieval tables (module docstring) of ``model`` on ``passages``.

    model: anything ``open_encoder`` takes.  layers: ints 0..n_layers and/or "final" (None = 0..n_layers);
    subspaces: None = all the model has.  dtype: the model runs in this dtype (a copy is cast when it
    differs; None = as it is).  ``offset`` and ``seed`` go to ``build_encodings``; ``max_positions``
    (default: the model's) caps every input's length, e.g. at the training length of a model whose table
    is longer, or to compare models at one length."""
    encoder = open_encoder(model, dtype=dtype)
    name = name or encoder.name
    layers, subspaces = encoder.resolve(layers, subspaces)
    unknown = [c for c in conditions if c not in CONDITIONS]
    if unknown or not conditions:
        raise ValueError(f"condition(s) {unknown or list(conditions)}: choose from {', '.join(CONDITIONS)}")
    if any(t >= encoder.vocab_size or t < 0 for p in passages for t in p.document_tokens):
        raise ValueError(f"a passage has a token id outside the model's vocabulary of {encoder.vocab_size}; "
                         "select the passages with this model's tokenizer")
    limit = encoder.max_positions if max_positions is None else max_positions
    if not 3 <= limit <= encoder.max_positions:
        raise ValueError(f"max_positions must be in [3, {encoder.max_positions}] for this model, got {limit}")
    encodings = build_encodings(passages, limit, offset=offset, seed=seed, special=encoder.special)
    keys = [(layer, subspace) for layer in layers for subspace in subspaces]
    n, runs = len(passages), (ALONE, *conditions)
    pooled = {(c, key): [] for c in runs for key in keys}  # -> [n, d] float64
    token_metrics = {(c, key): [] for c in conditions for key in keys}  # -> [n, 2] (cosine, rel. L2)
    batches = range(0, n, batch_size)
    for begin in progress_bar(batches, desc=f"invariance {name}", disable=not progress):
        batch = encodings[begin:begin + batch_size]
        lengths = [len(p.tokens) for p in passages[begin:begin + batch_size]]
        alone_states = None
        for condition in runs:
            states = _passage_states(encoder, layers, subspaces, [e[condition] for e in batch], lengths)
            for key, rows in states.items():
                pooled[(condition, key)] += [x.mean(dim=0) for x in rows]
            if condition == ALONE:
                alone_states = states
                continue
            for key, rows in states.items():
                token_metrics[(condition, key)] += [_compare(x, a) for x, a in zip(rows, alone_states[key])]

    invariance, retrieval = [], []
    mean_offset = float(np.mean([e["shift"].pad for e in encodings]))
    for key in keys:
        layer, subspace = key
        base = {"model": name, "variant": encoder.variant, "subspace": subspace, "layer": layer}
        database = torch.stack(pooled[(ALONE, key)]).numpy()
        for condition in conditions:
            queries = torch.stack(pooled[(condition, key)]).numpy()
            pooled_cosine, pooled_rel = _rowwise(torch.from_numpy(queries), torch.from_numpy(database))
            tokens = np.array(token_metrics[(condition, key)])
            invariance.append({**base, "condition": condition, "n_passages": n, "mean_offset": mean_offset,
                               "token_cosine": tokens[:, 0].mean(), "token_rel_l2": tokens[:, 1].mean(),
                               "pooled_cosine": pooled_cosine.mean(), "pooled_rel_l2": pooled_rel.mean()})
            for k, recall in recall_at_k(queries, database, ks).items():
                retrieval.append({**base, "condition": condition, "k": k, "recall": recall, "n_passages": n})
    return pd.DataFrame(invariance)[INVARIANCE_COLUMNS], pd.DataFrame(retrieval)[RETRIEVAL_COLUMNS]


def _passage_states(encoder: Encoder, layers, subspaces, encodings: list[Encoding], lengths: list[int]) -> dict:
    """One forward over ``encodings`` (left pads masked, right-padded to one length); {(layer, subspace):
    one [passage tokens, d] float64 tensor per encoding}."""
    width = max(e.pad + len(e.tokens) for e in encodings)
    tokens = torch.full((len(encodings), width), encoder.special.pad, dtype=torch.long)
    mask = torch.zeros(len(encodings), width, dtype=torch.bool)
    for row, encoding in enumerate(encodings):
        tokens[row, encoding.pad:encoding.pad + len(encoding.tokens)] = torch.tensor(encoding.tokens)
        mask[row, encoding.pad:encoding.pad + len(encoding.tokens)] = True
    states = encoder.states(tokens, layers, subspaces, attention_mask=mask)
    return {key: [full[row, e.pad + e.start:e.pad + e.start + length].to("cpu", torch.float64)
                  for row, (e, length) in enumerate(zip(encodings, lengths))]
            for key, full in states.items()}


def _rowwise(x: torch.Tensor, reference: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Per row: cos(x, reference) and |x - reference| / |reference|; x, reference: [rows, d]."""
    norms = x.norm(dim=-1) * reference.norm(dim=-1)
    cosine = (x * reference).sum(dim=-1) / norms.clamp(min=1e-300)
    relative = (x - reference).norm(dim=-1) / reference.norm(dim=-1).clamp(min=1e-300)
    return cosine.numpy(), relative.numpy()


def _compare(x: torch.Tensor, reference: torch.Tensor) -> tuple[float, float]:
    """Mean over rows (a passage's tokens) of the two numbers of ``_rowwise``."""
    cosine, relative = _rowwise(x, reference)
    return float(cosine.mean()), float(relative.mean())
