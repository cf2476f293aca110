"""A position basis from hidden states, for models without a position table (RoPE, RP, most HF encoders).

    from dstg_interp.analysis.position_basis import position_basis
    basis = position_basis(store, layer=3, subspace="full")         # any store, any model
    basis.means, basis.standard_error                               # [P, d] per-position mean, its s.e. (documents)
    basis.gram                                                      # [P, P] Gram matrix of the centred means
    basis.spectrum                                                  # spectra.analyze_table of the means (PCA, DCT)
    basis.summary["position_share"]                                 # share of the layer's variance they explain

The per-position mean m_p = mean of the states of every token at position p is the position table a layer
implicitly holds (``spectra.per_position_mean``); its PCA and DCT spectra (``spectra.analyze_table``) are then
read exactly as a learned table's, so the spectra figures cover every model.  A model that *has* a table and
adds it to the token embedding (AP-NeoBERT, BERT) gives back that table at layer 0, up to the mean token
embedding and noise, so the spectra agree.

Uncertainty: ``standard_error`` is the between-document standard error of each mean (documents resampled as
units: the tokens of a document share its context), estimated from per-document means; positions held by
fewer than ``min_documents`` documents are dropped.
Orthogonality of position and context: ``position_share`` = the between-position variance over the total
variance of the layer's states (the correlation ratio eta^2 summed over dimensions): 1 when every state is its
position's mean, ~ (P - 1) / n for states unrelated to position.  ``chance_share`` is that chance level.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .spectra import DEFAULT_CONTROL_DRAWS, TableSpectrum, analyze_table


@dataclass
class PositionBasis:
    name: str
    positions: np.ndarray  # [P] the positions kept
    means: np.ndarray  # [P, d]
    standard_error: np.ndarray  # [P, d]
    counts: np.ndarray  # [P] tokens per position
    gram: np.ndarray  # [P, P] (m_p - m)(m_q - m)'
    spectrum: TableSpectrum
    summary: dict = field(default_factory=dict)


def position_basis(store, layer, subspace: str | None = None, max_positions: int | None = None,
                   min_documents: int = 5, exclude_special: bool = True, name: str | None = None,
                   chunk_rows: int = 65536, sequences=None, control_draws: int = DEFAULT_CONTROL_DRAWS) -> PositionBasis:
    """The per-position mean basis of a store's (layer, subspace) states (module docstring); ``sequences``: the
    store's sequences (indices) to average over (None: all; ``analysis.geometry.balanced_selection`` picks ones
    that hold every position below ``max_positions``); ``control_draws``: Gaussian tables for the spectrum's
    controls (0: the spectrum alone, for a caller that reads the means with controls of its own)."""
    states = store.states(layer, subspace)
    labels = store.labels
    keep = ~labels["is_special"].to_numpy() if exclude_special else np.ones(len(labels), bool)
    positions = labels["token_position"].to_numpy()
    documents = labels["doc_index"].to_numpy()
    if max_positions is not None:
        keep &= positions < max_positions
    if sequences is not None:
        keep &= np.isin(labels["sequence"].to_numpy(), np.asarray(sequences))
    rows = np.flatnonzero(keep)
    if len(rows) == 0:
        raise ValueError("no tokens to average: the store has no non-special tokens in range")
    n_positions = int(positions[rows].max()) + 1
    width = states.shape[1]
    sums, squares = np.zeros((n_positions, width)), 0.0
    grand = np.zeros(width)
    doc_keys = documents[rows].astype(np.int64) * n_positions + positions[rows]
    unique_keys, key_index = np.unique(doc_keys, return_inverse=True)
    doc_sums = np.zeros((len(unique_keys), width))
    doc_counts = np.bincount(key_index, minlength=len(unique_keys)).astype(np.float64)
    for start in range(0, len(rows), chunk_rows):  # bounded memory: the store is read in row chunks
        part = rows[start:start + chunk_rows]
        block = np.asarray(states[part], dtype=np.float64)
        np.add.at(sums, positions[part], block)
        np.add.at(doc_sums, key_index[start:start + chunk_rows], block)
        grand += block.sum(axis=0)
        squares += float((block**2).sum())
    counts = np.bincount(positions[rows], minlength=n_positions).astype(np.float64)
    key_position = unique_keys % n_positions
    n_documents = np.bincount(key_position, minlength=n_positions)
    kept = np.flatnonzero(n_documents >= max(min_documents, 2))
    if len(kept) < 3:
        raise ValueError(f"fewer than 3 positions are held by {min_documents} documents or more; add documents")
    means = sums[kept] / counts[kept, None]
    standard_error = _between_document_error(doc_sums / doc_counts[:, None], key_position, means, kept, n_documents)
    label = name or f"layer {layer} {subspace or ''}".strip()
    return _assembled(label, kept, means, standard_error, counts[kept], grand, squares, len(rows), control_draws)


def _assembled(name: str, kept, means, standard_error, counts, grand, squares: float, n: int,
               control_draws: int) -> PositionBasis:
    """The basis of the kept positions' ``means`` [P, d] (their ``standard_error`` and token ``counts``), with its
    spectrum (``control_draws`` Gaussian tables for its controls; 0: none, and no smooth controls) and summary;
    ``grand`` [d] and ``squares`` (a number): the sum and the summed squares of all ``n`` tokens read, dropped
    positions' included."""
    total = squares - float((grand**2).sum()) / n  # summed over dimensions
    between = float((counts[:, None] * (means - grand / n) ** 2).sum())
    centred = means - means.mean(axis=0)
    summary = {"name": name, "n_tokens": int(n), "n_positions": int(len(kept)), "width": int(means.shape[1]),
               "position_share": min(between / total, 1.0) if total > 0 else 0.0,  # 1 + rounding for a pure table
               "chance_share": (len(kept) - 1) / max(n - 1, 1),
               "mean_standard_error": float(standard_error.mean()),
               "mean_spread_of_means": float(centred.std(axis=0).mean())}
    spectrum = analyze_table(means, name=name, positions=kept, n_control_draws=control_draws)
    summary.update({k: v for k, v in spectrum.summary.items() if not isinstance(v, (list, dict)) and k != "name"})
    return PositionBasis(name, kept, means, standard_error, counts, centred @ centred.T, spectrum, summary)


def basis_from_statistics(statistics, min_documents: int = 5, name: str = "layer",
                          control_draws: int = DEFAULT_CONTROL_DRAWS) -> PositionBasis:
    """``position_basis`` from sums taken during a forward pass (``analysis.geometry.PositionStatistics``, e.g.
    ``layer_statistics``) instead of a store: the same means, counts, shares and spectrum; the standard error from
    each position's spread of token states, which is the between-document one when every document holds at most
    one token per position (sequences read from the documents' starts, one per document, as the probes read
    them).  Positions held by fewer than ``min_documents`` tokens are dropped; ``control_draws`` as in
    ``position_basis``."""
    counts = statistics.counts
    kept = np.flatnonzero(counts >= max(min_documents, 2))
    if len(kept) < 3:
        raise ValueError(f"fewer than 3 positions are held by {min_documents} documents or more; add documents")
    held = counts[kept, None]
    means = statistics.sums[kept] / held
    deviations = np.maximum(statistics.position_squares[kept] - held * means**2, 0.0)
    standard_error = np.sqrt(deviations / (held - 1) / held)
    return _assembled(name, kept, means, standard_error, counts[kept], statistics.sums.sum(axis=0),
                      float(statistics.squares.sum()), statistics.n_tokens, control_draws)


def _between_document_error(doc_means, key_position, means, kept, n_documents) -> np.ndarray:
    """Standard error of each position's mean from the spread of its documents' own means."""
    index_of = np.full(int(key_position.max()) + 1, -1)
    index_of[kept] = np.arange(len(kept))
    rows = index_of[key_position]
    valid = rows >= 0
    deviations = np.zeros_like(means)
    np.add.at(deviations, rows[valid], (doc_means[valid] - means[rows[valid]]) ** 2)
    counts = n_documents[kept].astype(np.float64)[:, None]
    return np.sqrt(deviations / (counts - 1) / counts)
