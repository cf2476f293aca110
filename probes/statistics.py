"""The probes' sufficient statistics, summed batch by batch during a forward pass: no store needed.

    stats = PartStatistics(width=p, n_targets=k, n_parts=n_folds + 1, n_positions=T, device="cuda")
    stats = PartStatistics(..., gram_parts=n_folds)  # the held-out part's Gram not summed (its rows predicted instead)
    stats = PartStatistics(..., gram_precision="float32")  # Gram products in float32 (summed in float64): faster
    stats.add(x, part, position, y)          # x [m, p] float16/float64 rows, part [m] (CV fold or held out), y [m, k]
    stats.reduce(ranks)                       # torchrun: every rank's sums added up (after one shared reference)
    sums = stats.fold_sums(shift, n_folds)    # a probes.gram.FoldSums: what one pass over a store would give
    residual = stats.residual_sums(means, target_column, n_folds)   # the same, of x - means[position]

Everything ``probes.gram.solve_folds`` needs is a sum over rows (``probes.gram``): per part (the CV folds of
the training rows, then the held-out rows), X'X, X'1, X'Y, Y'1, Y'Y and n. The position-only baseline's
partial R² probes ``x - m[position]`` (``probes.position_baseline.PositionResiduals``, with ``m`` the per-position
training mean), whose ``m`` is known only after the pass; its sums follow from the same statistics kept per
(part, position):

    Σ (z - e_pos)(z - e_pos)' = Σ z z' - Σ_pos (C_pos e_pos' + e_pos C_pos') + Σ_pos n_pos e_pos e_pos'

with ``C_pos`` the sum of ``z`` over the part's rows at position ``pos``. Rows are summed as
``z = [x - r_pos | y | 1]`` around a reference state ``r_pos`` per position (the first one seen there), so
that a state that is (nearly) a function of position -- DSTG's AP stream, whose layer 0 *is* the position
table -- leaves exact zeros, not the rounding residue of two large sums, when its per-position mean is
taken out. Memory: (parts) x (p + k + 1)² + (parts x positions) x (p + k + 1) float64 per feature source,
flat in the number of tokens.

The Gram products are most of the cost. By default they are float64, so the sums are those a store's float16
states give in float64 (the store route's results to 1e-8). ``gram_precision="float32"`` forms each batch's
products of ``z`` in float32 and adds them to the float64 sums: twice as fast on a CPU (and far faster on a GPU
with little float64 throughput), at a rounding of about 1e-7 of each batch's products; the per-position sums
(``C_pos``), the references and every solve stay float64 (``docs/probes.md`` gives the measured difference).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from probes.gram import FoldSums

GRAM_PRECISIONS = ("float64", "float32")
GRAM_PIECES = 2  # each part's rows are summed as this many products, on any number of threads (the same bits)
_POOL: tuple[int, ThreadPoolExecutor] | None = None  # (threads, the Gram sums' pool), made on first use
_POOL_LOCK = threading.Lock()


def gram_threads() -> int:
    """How many parts' Grams are summed at once: torch's thread count, the cores the forward pass just used
    (each product itself on one BLAS thread: ``probes.grid.one_blas_thread``)."""
    return max(1, torch.get_num_threads())


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL[0] != gram_threads():
            _POOL = (gram_threads(), ThreadPoolExecutor(max_workers=gram_threads(), thread_name_prefix="gram-sums"))
        return _POOL[1]


class PartStatistics:
    """Sums over rows of ``[x - r_pos | y | 1]`` per part: the Gram of each part and the per-(part, position)
    sums. ``device``: where they are formed (the model's device: the states never leave it).

    ``gram_parts``: how many parts, from the first, get a Gram (default all).  The Grams are most of the
    statistics' cost, and the last part's (the held-out rows) is needed only to score the probes from sums: a
    caller that predicts the held-out rows themselves (``probes.storeless`` with a bootstrap) passes
    ``n_parts - 1``, and the sums it reads (``fold_sums``) then have no held-out part (test R² NaN, as a store
    route without one)."""

    def __init__(self, width: int, n_targets: int, n_parts: int, n_positions: int, device="cpu",
                 gram_parts: int | None = None, gram_precision: str = "float64"):
        self.p, self.k, self.n_parts, self.n_positions = width, n_targets, n_parts, n_positions
        if gram_precision not in GRAM_PRECISIONS:
            raise ValueError(f"gram_precision must be one of {', '.join(GRAM_PRECISIONS)}, got {gram_precision!r}")
        self.gram_precision = gram_precision
        self.gram_parts = n_parts if gram_parts is None else int(gram_parts)
        if not 1 <= self.gram_parts <= n_parts:
            raise ValueError(f"gram_parts must be in 1..{n_parts}, got {gram_parts}")
        w = width + n_targets + 1
        self.device = torch.device(device)
        self.gram = torch.zeros(self.gram_parts, w, w, dtype=torch.float64, device=self.device)
        self.cell = torch.zeros(n_parts * n_positions, w, dtype=torch.float64, device=self.device)
        self.reference = torch.zeros(n_positions, width, dtype=torch.float64, device=self.device)
        self.seen = torch.zeros(n_positions, dtype=torch.bool, device=self.device)
        self.non_finite = torch.zeros(width, dtype=torch.int64, device=self.device)

    def add(self, x: torch.Tensor, part: torch.Tensor, position: torch.Tensor, y: torch.Tensor) -> None:
        """Add rows ``x`` [m, p] (float16 or float64, read exactly in float64; NaN/inf are counted per column and
        summed as 0) in ``part`` [m] at ``position`` [m] with targets ``y`` [m, k] (already shifted by their
        means).  Rows already in part order (as ``probes.storeless`` gathers them) are summed where they lie;
        others are sorted first."""
        if len(x) == 0:
            return
        z = torch.empty(len(x), self.p + self.k + 1, dtype=torch.float64, device=x.device)
        states = z[:, :self.p]
        states.copy_(x)  # float16 -> float64 is exact
        if not bool(torch.isfinite(states.sum())):  # one reduction for the common case; a float64 sum of
            finite = torch.isfinite(states)          # float16-range states cannot overflow
            self.non_finite += (~finite).sum(dim=0)
            states.masked_fill_(~finite, 0.0)
        new = ~self.seen[position]
        if bool(new.any()):  # the first row seen at a position becomes its reference
            rows = torch.nonzero(new).flatten()
            order = rows[torch.argsort(position[rows], stable=True)]  # by position, first row first
            positions = position[order]
            starts = torch.ones_like(positions, dtype=torch.bool)
            starts[1:] = positions[1:] != positions[:-1]
            self.reference[positions[starts]] = states[order[starts]]
            self.seen[positions[starts]] = True
        states.sub_(torch.index_select(self.reference, 0, position))  # index_select: a fast gather of whole rows
        z[:, self.p:self.p + self.k] = y
        z[:, -1] = 1.0
        self.cell.index_add_(0, part * self.n_positions + position, z)
        if len(part) > 1 and not bool((part[1:] >= part[:-1]).all()):
            order = torch.argsort(part, stable=True)
            z, part = z[order], part[order]
        bounds = torch.searchsorted(part, torch.arange(self.n_parts + 1, device=part.device)).tolist()
        if z.device.type != "cpu":
            for f in range(self.gram_parts):
                block = z[bounds[f]:bounds[f + 1]]
                if self.gram_precision == "float32":
                    block = block.float()
                    self.gram[f] += block.T @ block
                else:
                    self.gram[f].addmm_(block.T, block)
            return
        self._add_grams_on_cpu(z, bounds)

    def _add_grams_on_cpu(self, z: torch.Tensor, bounds: list[int]) -> None:
        """gram[f] += z_f' z_f for every part with a Gram, each part's rows summed as ``GRAM_PIECES`` products.

        The pieces (of every part) run side by side on torch's thread count (``gram_threads``; numpy lets go of the
        GIL in BLAS), so two threads share five parts evenly rather than one of them taking three; each piece is
        added to its part's Gram in piece order (a piece waits for the one before it), whatever the threads, so
        the sums are bit for bit those of one thread."""
        pieces = [(f, j, piece) for f in range(self.gram_parts)
                  for j, piece in enumerate(_pieces(bounds[f], bounds[f + 1], GRAM_PIECES))]
        added = {(f, j): threading.Event() for f, j, _ in pieces}
        rows = z.numpy()

        def add_piece(f: int, j: int, piece: slice) -> None:
            try:
                block = rows[piece]
                if self.gram_precision == "float32":  # rounded into this thread's float32 rows, one float32 product
                    rounded = _thread_rows(block.shape)
                    np.copyto(rounded, block, casting="same_kind")
                    block = rounded
                product = rows_gram(block, _thread_buffer((block.shape[1],) * 2, block.dtype))
                if j:
                    added[f, j - 1].wait()  # submitted before this piece, so already running or done: no deadlock
                gram = self.gram[f].numpy()
                gram += product
            finally:  # a piece that failed (its error reaches the caller) still lets the next one go on
                added[f, j].set()

        if len(pieces) > 1 and gram_threads() > 1:
            for done in [_pool().submit(add_piece, *piece) for piece in pieces]:
                done.result()
        else:
            for piece in pieces:
                add_piece(*piece)

    # --- several ranks -----------------------------------------------------------------------
    def rereference(self, reference: torch.Tensor) -> None:
        """Express the sums around another per-position reference (exact algebra; no pass over rows)."""
        offset = torch.zeros(self.n_positions, self.p + self.k + 1, dtype=torch.float64, device=self.device)
        offset[:, :self.p] = reference.to(self.device) - self.reference  # z_new = z - offset[pos]
        self.gram = shifted_grams(self.gram, self.cells()[:self.gram_parts], offset).contiguous()  # contiguous: the Grams are added to in place through numpy views
        counts = self.cells()[:, :, -1:]
        self.cell -= (counts * offset[None]).reshape(self.cell.shape)
        self.reference = reference.to(self.device).clone()

    def reduce(self, ranks) -> None:
        """Every rank's sums added up, on every rank (``dstg_interp.store.distributed.Ranks``): the ranks first
        agree on one reference per position (the lowest rank's that saw it)."""
        if not getattr(ranks, "grouped", False):
            return
        seen = ranks.gather(self.seen.cpu())
        references = ranks.gather(self.reference.cpu())
        common = torch.zeros_like(self.reference, device="cpu")
        taken = torch.zeros(self.n_positions, dtype=torch.bool)
        for rank_seen, rank_reference in zip(seen, references):
            pick = rank_seen & ~taken
            common[pick] = rank_reference[pick]
            taken |= pick
        self.rereference(common)
        self.seen = taken.to(self.device)
        for tensor in (self.gram, self.cell, self.non_finite):
            ranks.sum_(tensor)

    # --- what the probes read ------------------------------------------------------------------
    def cells(self) -> torch.Tensor:
        return self.cell.reshape(self.n_parts, self.n_positions, -1)

    def position_sums(self, parts: slice) -> tuple[np.ndarray, np.ndarray]:
        """(Σ x per position [positions, p], rows per position) over ``parts``."""
        cells = self.cells()[parts].sum(dim=0)
        counts = cells[:, -1]
        sums = cells[:, :self.p] + counts[:, None] * self.reference
        return sums.cpu().numpy(), counts.cpu().numpy()

    def augmented(self, centre: np.ndarray) -> np.ndarray:
        """The per-part sums of ``[x - centre_pos | y | 1][...]'`` (``centre``: [p] or [positions, p]) of the parts
        with a Gram, float64 numpy."""
        centre = torch.as_tensor(np.broadcast_to(centre, (self.n_positions, self.p)).copy(), dtype=torch.float64,
                                 device=self.device)
        offset = torch.zeros(self.n_positions, self.p + self.k + 1, dtype=torch.float64, device=self.device)
        offset[:, :self.p] = centre - self.reference
        return shifted_grams(self.gram, self.cells()[:self.gram_parts], offset).cpu().numpy()

    def fold_sums(self, shift: np.ndarray, y_shift: np.ndarray, targets, n_folds: int) -> FoldSums:
        """FoldSums of the features around ``shift`` for the target columns ``targets`` (indices into y)."""
        return _fold_sums(self.augmented(shift), self.p, list(targets), shift, y_shift, self.non_finite.cpu().numpy(),
                          n_folds)

    def residual_sums(self, means: np.ndarray, y_shift: np.ndarray, targets, n_folds: int) -> FoldSums:
        """FoldSums of ``x - means[position]`` (no further shift: the residuals are centred per position)."""
        return _fold_sums(self.augmented(means), self.p, list(targets), np.zeros(self.p), y_shift,
                          self.non_finite.cpu().numpy(), n_folds)


def _pieces(start: int, stop: int, n: int) -> list[slice]:
    """rows start..stop in at most ``n`` runs of near-equal length (none empty)."""
    edges = np.linspace(start, stop, min(n, stop - start) + 1).round().astype(int)
    return [slice(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


def rows_gram(rows: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """rows' rows for a C-ordered [m, w] float64 block (into ``out`` [w, w] when given): numpy hands ``A' A`` of
    one buffer to BLAS's syrk (half a GEMM's work, the triangle then mirrored: exactly symmetric) and, unlike
    scipy's BLAS wrappers, lets go of the GIL while it runs, so the parts' products on several threads run side by
    side (``benchmarks/README.md``)."""
    return np.matmul(rows.T, rows, out=out)


_BUFFERS = threading.local()


def _thread_buffer(shape: tuple, dtype=np.float64) -> np.ndarray:
    """One product buffer per thread, shape and dtype (the model's and its control's Grams differ in their
    target columns), reused batch after batch: the Gram threads allocate nothing (memory freed on several threads
    stays in glibc's per-thread arenas, and RSS with it)."""
    buffers = getattr(_BUFFERS, "grams", None)
    if buffers is None:
        buffers = _BUFFERS.grams = {}
    key = (shape, np.dtype(dtype))
    if key not in buffers:
        buffers[key] = np.empty(shape, dtype=dtype)
    return buffers[key]


def _thread_rows(shape: tuple) -> np.ndarray:
    """This thread's float32 rows [m, w] for ``gram_precision="float32"``: a view of one buffer per width that grows
    to the largest piece seen, reused as ``_thread_buffer`` is."""
    rows, width = shape
    buffers = getattr(_BUFFERS, "rows32", None)
    if buffers is None:
        buffers = _BUFFERS.rows32 = {}
    if width not in buffers or len(buffers[width]) < rows:
        buffers[width] = np.empty((rows, width), np.float32)
    return buffers[width][:rows]


def shifted_grams(gram: torch.Tensor, cells: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
    """Σ (z - e_pos)(z - e_pos)' per part from Σ z z' (``gram`` [P, w, w]), Σ z per (part, position)
    (``cells`` [P, T, w]; its last column counts rows) and e (``offset`` [T, w])."""
    cross = torch.matmul(cells.transpose(1, 2), offset)  # Σ_pos C_pos e_pos', [P, w, w]
    weighted = torch.stack([(offset * counts[:, None]).T @ offset for counts in cells[:, :, -1]])  # Σ n_pos e e'
    return gram - cross - cross.transpose(1, 2) + weighted


def _fold_sums(augmented: np.ndarray, p: int, targets: list[int], x_shift, y_shift, non_finite, n_folds) -> FoldSums:
    y_index = np.asarray([p + t for t in targets])
    return FoldSums(n=augmented[:, -1, -1].copy(), gram=augmented[:, :p, :p].copy(), x_sum=augmented[:, :p, -1].copy(),
                    xy=augmented[:, :p, y_index].copy(), y_sum=augmented[:, y_index, -1].copy(),
                    yy=augmented[:, y_index, y_index].copy(), x_shift=np.asarray(x_shift, dtype=np.float64),
                    y_shift=np.asarray(y_shift, dtype=np.float64), non_finite_columns=np.asarray(non_finite),
                    n_folds=n_folds)
