"""The position geometry of an encoder: one row of numbers per position table, each beside its smooth control.

    from dstg_interp.analysis.geometry import layer_statistics, table_geometry, state_geometry
    statistics = layer_statistics(encoder, sequences)          # {(layer, subspace): PositionStatistics}, storeless
    row = state_geometry(statistics[(3, "full")], min_count=20)  # a dict: PCs, DCT, stress, outliers, controls
    row = table_geometry(position_table(model))                   # the same numbers for a learned table

A *position table* is a [P, d] matrix whose rows are indexed by position: a learned table, or a layer's position
basis -- the mean of the layer's states over every non-special token at position p of the held-out documents
(``analysis.position_basis``, here summed batch by batch, ``PositionStatistics``, so no activation store is
written).  Each table gives:

- PC1+PC2, PCs to 95% of the variance, the participation ratio and the DCT-II low-bin share (bins 0..3, up to 1.5
  periods over the P positions; ``low_freq_bins`` names them) from ``spectra.analyze_table`` -- the same code as
  the spectra figures -- with its two smooth controls beside each (``walk_*``: random walks of the table's shape,
  ``smoothed_*``: white noise smoothed to the table's own lag-1 autocorrelation; mean and q95 over seeded draws,
  ``spectra.smooth_controls``).  A number above its controls' q95 is more than "smooth".
- ``mds_stress``: Kruskal's stress-1 of the 2-D classical MDS of the positions,
  sqrt(sum_{i<j} (d_ij - e_ij)^2 / sum_{i<j} d_ij^2), with d_ij the Euclidean distance between the rows of
  positions i and j and e_ij their distance in the 2-D classical-MDS embedding (``classical_mds``: double-centred
  squared distances, top two eigenvectors).  0 when the positions lie on a plane, near 1 when a 2-D map keeps
  nothing.  Cirrincione (arXiv 2604.05217) runs classical MDS on the Hellinger distances between positions'
  *corpus word distributions* and scores an encoding against that target; those distributions are a property of
  the corpus, not of the encoder, and the paper's exact scoring could not be checked offline, so this is the plain
  Euclidean version on the encoder's own table (how far the position geometry is from a 2-D map), beside the same
  number for the two smooth controls of ``stress_control`` (``walk_mds_stress``, ``smoothed_mds_stress``, with q05
  / q95), drawn with ``spectra.random_walk_table`` / ``spectra.smoothed_noise_table``.
- ``outlier_dims``: position-tied outlier dimensions (Luo et al., arXiv 2011.04393).  A dimension is an outlier
  when its mean magnitude, mean_t |h_t,k| over the tokens, is more than ``outlier_sd`` (3) standard deviations
  above the mean magnitude over all dimensions, and position-tied when the per-position mean predicts it:
  R^2_k = between-position sum of squares / total sum of squares of dimension k (the correlation ratio eta^2)
  is at least ``min_position_r2`` (0.5).  For a learned table each row is its own position, so R^2_k = 1 and
  the rule is the magnitude alone.  With d dimensions one outlier can lie at most (d - 1) / sqrt(d) sd above
  the mean (3.75 at d = 16), so a narrow table shows one outlier at most.
- ``position_share``: the between-position share of the layer's variance summed over dimensions
  (``analysis.position_basis``'s number), and ``chance_share`` = (P - 1) / (n - 1).

Positions held by fewer than ``min_count`` tokens (one per sequence: a position occurs once in a sequence) are
dropped, as ``position_basis`` drops positions held by few documents.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from scipy.spatial.distance import pdist, squareform

from ..encoders import Encoder
from .spectra import DEFAULT_LOW_BINS, MIN_CONTROL_POSITIONS, analyze_table, random_walk_table, smoothed_noise_table

STRESS_DIMENSIONS = 2  # a 2-D map: the paper's "manifold" reading
STRESS_CONTROL_DRAWS = 20
OUTLIER_SD = 3.0
MIN_POSITION_R2 = 0.5
SPECTRUM_KEYS = ("pc1_pc2", "pcs_95", "participation_ratio", "low_freq_share")  # each beside its smooth controls
CONTROL_FAMILIES = ("walk", "smoothed")


# --- the statistics, summed during the forward pass ------------------------------------------------
@dataclass
class PositionStatistics:
    """Sums over the tokens of one (layer, subspace): per position, the token count and the sum of states; per
    dimension, the sum of |h|, of h and of h^2.  Enough for the position basis (per-position means), the
    per-dimension magnitude and each dimension's position R^2, without keeping a single state."""

    n_positions: int
    width: int
    counts: np.ndarray = field(init=False)  # [P]
    sums: np.ndarray = field(init=False)  # [P, d]
    absolute: np.ndarray = field(init=False)  # [d] sum of |h|
    position_squares: np.ndarray = field(init=False)  # [P, d] sum of h^2 per position (the means' standard error)

    def __post_init__(self) -> None:
        self.counts = np.zeros(self.n_positions)
        self.sums = np.zeros((self.n_positions, self.width))
        self.absolute = np.zeros(self.width)
        self.position_squares = np.zeros((self.n_positions, self.width))

    def add(self, states, positions) -> None:
        """Add ``states`` [n, d] (numpy or torch) of tokens at ``positions`` [n] (integers < n_positions)."""
        states = torch.as_tensor(states).detach().to("cpu", torch.float64)
        positions = torch.as_tensor(positions).detach().to("cpu", torch.int64).reshape(-1)
        if states.ndim != 2 or states.shape != (positions.shape[0], self.width):
            raise ValueError(f"states must be [n, {self.width}] beside positions [n]; got {list(states.shape)} "
                             f"and {list(positions.shape)}")
        if len(positions) and (int(positions.min()) < 0 or int(positions.max()) >= self.n_positions):
            raise ValueError(f"positions must lie in 0..{self.n_positions - 1}")
        sums = torch.zeros(self.n_positions, self.width, dtype=torch.float64).index_add_(0, positions, states)
        squares = torch.zeros(self.n_positions, self.width, dtype=torch.float64).index_add_(0, positions, states**2)
        self.sums += sums.numpy()
        self.counts += np.bincount(positions.numpy(), minlength=self.n_positions)
        self.absolute += states.abs().sum(dim=0).numpy()
        self.position_squares += squares.numpy()

    @property
    def squares(self) -> np.ndarray:
        """[d] sum of h^2 over every token."""
        return self.position_squares.sum(axis=0)

    @property
    def n_tokens(self) -> int:
        return int(self.counts.sum())

    def kept(self, min_count: int = 1) -> np.ndarray:
        """The positions held by at least ``min_count`` tokens."""
        return np.flatnonzero(self.counts >= max(min_count, 1))

    def means(self, min_count: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """(the position basis [P_kept, d]: each kept position's mean state, the kept positions [P_kept])."""
        kept = self.kept(min_count)
        return self.sums[kept] / self.counts[kept, None], kept

    def dimension_numbers(self) -> tuple[np.ndarray, np.ndarray]:
        """(mean magnitude mean_t |h_t,k| [d], position R^2 [d]: between-position over total sum of squares of
        each dimension, over every token; 0 for a constant dimension)."""
        n = max(self.n_tokens, 1)
        grand = self.sums.sum(axis=0) / n
        squares = self.squares
        total = squares - n * grand**2
        seen = self.counts > 0
        between = (self.counts[seen, None] * (self.sums[seen] / self.counts[seen, None] - grand) ** 2).sum(axis=0)
        r2 = np.where(total > 1e-12 * np.maximum(squares, 1e-300), between / np.where(total > 0, total, 1), 0.0)
        return self.absolute / n, np.clip(r2, 0.0, 1.0)

    def position_share(self, min_count: int = 1) -> tuple[float, float]:
        """(between-position share of the total variance summed over dimensions, over the kept positions'
        tokens; its chance level (P_kept - 1) / (n - 1))."""
        kept = self.kept(min_count)
        n = float(self.counts[kept].sum())
        if n < 2:
            return float("nan"), float("nan")
        grand = self.sums[kept].sum(axis=0) / n
        means = self.sums[kept] / self.counts[kept, None]
        between = float((self.counts[kept, None] * (means - grand) ** 2).sum())
        # the squares are summed over every token: the share is read over all positions when some are dropped
        total = float(self.squares.sum()) - self.n_tokens * float(((self.sums.sum(axis=0) / self.n_tokens) ** 2).sum())
        return (min(between / total, 1.0) if total > 0 else 0.0), (len(kept) - 1) / (n - 1)


SEQUENCE_SETS = ("balanced", "all")  # which sequences a layer's per-position means are over (balanced_selection)


def sequence_lengths_of(labels) -> np.ndarray:
    """Each sequence's length (tokens, [CLS] and [SEP] included) from a store's labels table."""
    return np.bincount(labels["sequence"].to_numpy().astype(np.int64))


def balanced_selection(lengths, min_count: int = 1) -> tuple[np.ndarray, int]:
    """The sequences and positions over which every position is held by the same sequences: the longest length
    ``L`` that at least ``min_count`` sequences reach, those sequences (indices) and ``L - 1``, the positions below
    which each of them holds a content token (its [SEP] is at L - 1 or later).  Per-position means over all
    sequences instead drift with position for a reason that is not position: position p is averaged over the
    sequences longer than p, whose context differs from the shorter ones' (a model without any position input
    reads as a smooth curve).  ValueError when no length is reached by ``min_count`` sequences."""
    lengths = np.asarray(lengths, dtype=np.int64)
    reached = np.sort(lengths)[::-1]
    if len(reached) < max(min_count, 1):
        raise ValueError(f"{len(reached)} sequence(s): fewer than the {min_count} each position must be held by; give "
                         "more documents or a lower --min-count")
    common = int(reached[max(min_count, 1) - 1])
    return np.flatnonzero(lengths >= common), common - 1


def sequence_selection(lengths, how: str, min_count: int = 1) -> tuple[np.ndarray | None, int | None]:
    """(the sequences, the positions below which) a layer's per-position means read, by ``how`` (``SEQUENCE_SETS``):
    ``balanced_selection`` for "balanced", (None, None) -- every sequence, every position -- for "all"."""
    if how not in SEQUENCE_SETS:
        raise ValueError(f"sequences must be one of {', '.join(SEQUENCE_SETS)}, got {how!r}")
    return balanced_selection(lengths, min_count) if how == "balanced" else (None, None)


def layer_statistics(encoder: Encoder, sequences, layers=None, subspaces=None, batch_size: int = 32,
                     progress: bool = False, desc: str | None = None, positions_below: int | None = None) -> dict:
    """One forward pass over ``sequences`` (StructuredSequences) with ``encoder.iter_states``: the
    ``PositionStatistics`` of every (layer, subspace) (None: every integer layer, every subspace) over the
    non-special tokens ([CLS] / [SEP] left out, as the position basis leaves them), at positions below
    ``positions_below`` (None: all; see ``balanced_selection``).  Only the sums are kept."""
    layers, subspaces = encoder.resolve(layers, subspaces)
    layers = [layer for layer in layers if isinstance(layer, int)]
    special = np.asarray(sequences.arrays["is_special"], dtype=bool)
    offsets = sequences.offsets
    n_positions = int(sequences.lengths.max()) if len(sequences) else 0
    statistics: dict = {}
    for batch in encoder.iter_states(sequences, layers, subspaces, batch_size=batch_size, progress=progress, desc=desc):
        mask = batch.attention_mask.cpu().numpy().astype(bool)  # [B, T]
        keep = mask.copy()
        for row, index in enumerate(batch.indices):
            length = offsets[index + 1] - offsets[index]
            keep[row, :length] &= ~special[offsets[index]:offsets[index + 1]]
        if positions_below is not None:
            keep[:, positions_below:] = False
        rows, positions = np.nonzero(keep)
        for key, states in batch.states.items():  # [B, T, d]
            if key not in statistics:
                statistics[key] = PositionStatistics(n_positions, int(states.shape[-1]))
            statistics[key].add(states[torch.as_tensor(rows), torch.as_tensor(positions)], positions)
    return statistics


# --- the numbers -----------------------------------------------------------------------------------
def classical_mds(distances, n_components: int = STRESS_DIMENSIONS) -> np.ndarray:
    """Classical (Torgerson) MDS: the [P, n_components] configuration whose inner products best match
    B = -1/2 J D^2 J (J the centring matrix), from B's leading eigenvectors scaled by sqrt(eigenvalue)
    (negative eigenvalues count as 0).  For Euclidean distances between the rows of X this is X's PCA scores."""
    distances = np.asarray(distances, dtype=np.float64)
    if distances.ndim != 2 or distances.shape[0] != distances.shape[1]:
        raise ValueError(f"distances must be a square [P, P] matrix, got shape {distances.shape}")
    squared = distances**2
    centred = squared - squared.mean(axis=0) - squared.mean(axis=1, keepdims=True) + squared.mean()
    values, vectors = np.linalg.eigh(-0.5 * centred)
    order = np.argsort(values)[::-1][:n_components]
    return vectors[:, order] * np.sqrt(np.clip(values[order], 0.0, None))


def euclidean_distances(table) -> np.ndarray:
    """[P, P] Euclidean distances between the rows of ``table`` [P, d]."""
    table = np.asarray(table, dtype=np.float64)
    return squareform(pdist(table))  # pairwise differences: exact zeros for equal rows, unlike a Gram expansion


def kruskal_stress(distances, embedded) -> float:
    """Stress-1: sqrt(sum_{i<j} (d_ij - e_ij)^2 / sum_{i<j} d_ij^2) for target distances ``distances`` [P, P] and
    the distances ``embedded`` [P, P] of a configuration (0: every distance kept; NaN for all-zero targets)."""
    upper = np.triu_indices(len(distances), k=1)
    target, fitted = np.asarray(distances)[upper], np.asarray(embedded)[upper]
    scale = float((target**2).sum())
    return float(np.sqrt(((target - fitted) ** 2).sum() / scale)) if scale > 0 else float("nan")


def mds_stress(table, n_components: int = STRESS_DIMENSIONS) -> float:
    """Kruskal stress-1 of the ``n_components``-D classical MDS of the rows of ``table`` [P, d] (module docstring)."""
    distances = euclidean_distances(table)
    return kruskal_stress(distances, euclidean_distances(classical_mds(distances, n_components)))


def stress_control(shape: tuple[int, int], family: str = "walk", roughness: float | None = None,
                   n_draws: int = STRESS_CONTROL_DRAWS, seed: int = 0) -> dict:
    """``mds_stress`` of ``n_draws`` structureless smooth tables of ``shape``: random walks (``walk``) or white
    noise smoothed to lag-1 autocorrelation ``roughness`` (``smoothed``), the families of
    ``spectra.smooth_controls``: {"mean", "q05", "q95", "n_draws"}."""
    if family not in CONTROL_FAMILIES:
        raise ValueError(f"unknown smooth control {family!r}; choose from {', '.join(CONTROL_FAMILIES)}")
    if family == "smoothed" and roughness is None:
        raise ValueError("the smoothed-noise control needs the table's roughness (spectra.lag1_autocorrelation)")
    rng = np.random.default_rng(seed)
    stack = (n_draws, *shape)
    tables = random_walk_table(stack, rng) if family == "walk" else smoothed_noise_table(stack, rng, roughness)
    values = np.array([mds_stress(table) for table in tables])
    return {"mean": float(values.mean()), "q05": float(np.quantile(values, 0.05)),
            "q95": float(np.quantile(values, 0.95)), "n_draws": int(n_draws)}


def outlier_dimensions(magnitude, position_r2, n_sd: float = OUTLIER_SD,
                       min_r2: float = MIN_POSITION_R2) -> list[int]:
    """The position-tied outlier dimensions: magnitude > mean + ``n_sd`` sd over dimensions and position R^2 >=
    ``min_r2`` (module docstring), ascending.  ``magnitude`` and ``position_r2``: [d]."""
    magnitude, position_r2 = np.asarray(magnitude, dtype=np.float64), np.asarray(position_r2, dtype=np.float64)
    threshold = magnitude.mean() + n_sd * magnitude.std()
    return [int(k) for k in np.flatnonzero((magnitude > threshold) & (position_r2 >= min_r2))]


def table_geometry(table, name: str = "table", positions=None, seed: int = 0, n_stress_draws: int = STRESS_CONTROL_DRAWS,
                   n_low_bins: int = DEFAULT_LOW_BINS, magnitude=None, position_r2=None, n_sd: float = OUTLIER_SD,
                   min_r2: float = MIN_POSITION_R2) -> dict:
    """Every number of the module docstring for one position table [P, d], as a flat dict (one row of a tidy table):
    the spectrum and its smooth controls (``spectra.analyze_table``), the MDS stress and its controls, and the
    position-tied outlier dimensions from ``magnitude`` / ``position_r2`` [d] (None: the table's own rows, each
    its own position: magnitude = mean |row value|, R^2 = 1).  ``notes`` says what could not be read."""
    spectrum = analyze_table(table, name=name, positions=positions, n_low_bins=n_low_bins, seed=seed)
    summary, table = spectrum.summary, np.asarray(table, dtype=np.float64)
    row: dict = {"n_positions": int(table.shape[0]), "width": int(table.shape[1]),
                 "low_freq_bins": f"0-{n_low_bins - 1}"}
    notes = []
    has_controls = "walk_pc1_pc2" in summary
    if not has_controls:
        notes.append(f"no smooth control: fewer than {MIN_CONTROL_POSITIONS} positions, or a constant table")
    for key in SPECTRUM_KEYS:
        row[key] = summary[key]
        for family in CONTROL_FAMILIES:
            for suffix in ("", "_q95"):
                row[f"{family}_{key}{suffix}"] = summary.get(f"{family}_{key}{suffix}", float("nan"))
    row["mds_stress"] = mds_stress(table)
    for family in CONTROL_FAMILIES:
        if has_controls:
            control = stress_control(table.shape, family, summary.get("lag1_autocorrelation"), n_stress_draws, seed)
        else:
            control = {"mean": float("nan"), "q05": float("nan"), "q95": float("nan")}
        row[f"{family}_mds_stress"], row[f"{family}_mds_stress_q05"] = control["mean"], control["q05"]
        row[f"{family}_mds_stress_q95"] = control["q95"]
    if magnitude is None:
        magnitude, position_r2 = np.abs(table).mean(axis=0), np.ones(table.shape[1])
    dims = outlier_dimensions(magnitude, position_r2, n_sd, min_r2)
    row["n_outlier_dims"], row["outlier_dims"] = len(dims), " ".join(map(str, dims))
    row["max_position_r2"] = float(np.max(position_r2))
    row["notes"] = "; ".join(notes)
    return row


def state_geometry(statistics: PositionStatistics, name: str = "layer", min_count: int = 1, seed: int = 0,
                   n_stress_draws: int = STRESS_CONTROL_DRAWS, n_sd: float = OUTLIER_SD,
                   min_r2: float = MIN_POSITION_R2) -> dict:
    """``table_geometry`` of a layer's position basis (the per-position means of ``statistics``, positions held by
    ``min_count`` tokens or more), its outlier rule read on every token, plus ``n_tokens``, ``position_share``
    and ``chance_share``.  Fewer than 3 kept positions: ValueError naming the count."""
    table, positions = statistics.means(min_count)
    if len(positions) < 3:
        raise ValueError(f"only {len(positions)} positions are held by {min_count} tokens or more (3 needed); "
                         "give more or longer documents, or a lower --min-count")
    magnitude, position_r2 = statistics.dimension_numbers()
    row = table_geometry(table, name, positions, seed, n_stress_draws, magnitude=magnitude, position_r2=position_r2,
                         n_sd=n_sd, min_r2=min_r2)
    share, chance = statistics.position_share(min_count)
    return {**row, "n_tokens": statistics.n_tokens, "position_share": share, "chance_share": chance}


def store_statistics(store, layers=None, subspaces=None, chunk_rows: int = 65536, sequences=None,
                     positions_below: int | None = None) -> dict:
    """``layer_statistics`` read from an activation store (``--store``: the states ``dstg-probe`` keeps, float16)
    instead of a forward pass: {(layer, subspace): PositionStatistics} over the non-special tokens (of the
    ``sequences`` given, by index; None: all; at positions below ``positions_below``), the store read in row
    chunks."""
    labels = store.labels
    positions = labels["token_position"].to_numpy().astype(np.int64)
    wanted = ~labels["is_special"].to_numpy()
    if sequences is not None:
        wanted &= np.isin(labels["sequence"].to_numpy(), np.asarray(sequences))
    if positions_below is not None:
        wanted &= positions < positions_below
    keep = np.flatnonzero(wanted)
    n_positions = int(positions.max()) + 1 if len(positions) else 0
    layers = [layer for layer in (store.layers if layers is None else layers) if isinstance(layer, int)]
    statistics = {}
    for layer in layers:
        for subspace in store.subspaces if subspaces is None else subspaces:
            states = store.states(layer, subspace)
            summed = PositionStatistics(n_positions, int(states.shape[1]))
            for start in range(0, len(keep), chunk_rows):
                rows = keep[start:start + chunk_rows]
                summed.add(np.asarray(states[rows], dtype=np.float64), positions[rows])
            statistics[(layer, subspace)] = summed
    return statistics


# --- start-vs-end bias of a pooled embedding ----------------------------------------------------------------
# an irrelevant sentence (written for this test): inserted at a document's start or end (arXiv 2412.15241's protocol)
FILLER = "The weather report for the coastal towns was read aloud at noon, as it is every day."
BIAS_BOOTSTRAP = 1000


def start_end_bias(encoder: Encoder, contents, filler_ids, batch_size: int = 32, seed: int = 0,
                   n_bootstrap: int = BIAS_BOOTSTRAP) -> dict:
    """How much more a mean-pooled embedding moves when an irrelevant sentence is inserted at the start of a
    document than at its end (Goel et al., arXiv 2412.15241: embedding models weight the start).

    ``contents``: documents as token-id lists without special tokens; ``filler_ids``: the inserted sentence's ids.
    Each document is cut so that [CLS] filler document [SEP] fits the model's positions; its embedding is the mean
    of the last layer's ``full`` state over the non-special tokens, read three ways: alone, with the filler first,
    with the filler last.  ``change_start`` / ``change_end``: the mean over documents of 1 - cos(alone, with filler);
    ``bias`` = change_start - change_end (> 0: the start weighs more) with a bootstrap 95% interval over documents
    (``seed``) -- the control a bias is read against is that interval excluding 0 -- and ``share_start_larger``,
    the share of documents whose start insertion moves the embedding more."""
    filler = [int(t) for t in filler_ids]
    room = encoder.max_positions - 2 - len(filler)
    if not filler or room < 1:
        raise ValueError(f"the filler has {len(filler)} tokens; it must be non-empty and leave room for a document "
                         f"in {encoder.max_positions} positions")
    documents = [[int(t) for t in content][:room] for content in contents]
    documents = [d for d in documents if d]
    if len(documents) < 2:
        raise ValueError(f"start_end_bias needs at least 2 non-empty documents, got {len(documents)}")
    cls, sep = encoder.special.cls, encoder.special.sep
    layer = encoder.resolve(["last"], ["full"])[0][0]
    variants = {"alone": lambda d: d, "start": lambda d: filler + d, "end": lambda d: d + filler}
    pooled: dict[str, list[np.ndarray]] = {name: [] for name in variants}
    for start in range(0, len(documents), batch_size):
        part = documents[start:start + batch_size]
        for name, build in variants.items():
            rows = [[cls, *build(d), sep] for d in part]
            tokens, mask = encoder.pad(rows)
            states = encoder.states(tokens, [layer], ["full"], attention_mask=mask)[(layer, "full")].double()
            keep = mask.clone()
            keep[:, 0] = False  # [CLS]
            keep[torch.arange(len(rows)), mask.sum(1) - 1] = False  # [SEP]
            weights = keep[..., None].double()
            pooled[name].append(((states * weights).sum(1) / weights.sum(1)).cpu().numpy())
    embeddings = {name: np.concatenate(parts) for name, parts in pooled.items()}

    def change(other: np.ndarray) -> np.ndarray:
        alone = embeddings["alone"]
        cos = (alone * other).sum(1) / (np.linalg.norm(alone, axis=1) * np.linalg.norm(other, axis=1))
        return 1 - cos
    start_change, end_change = change(embeddings["start"]), change(embeddings["end"])
    difference = start_change - end_change
    draws = np.random.default_rng(seed).integers(0, len(difference), (n_bootstrap, len(difference)))
    low, high = np.quantile(difference[draws].mean(axis=1), [0.025, 0.975])
    return {"n_documents": len(documents), "filler_tokens": len(filler), "change_start": float(start_change.mean()),
            "change_end": float(end_change.mean()), "bias": float(difference.mean()), "bias_low": float(low),
            "bias_high": float(high), "share_start_larger": float((difference > 0).mean())}
