"""`ModelConfig`: one validated dataclass describing DSTG-NeoBERT and its three baselines.

    from dstg_interp import ModelConfig, build_model
    cfg = ModelConfig(variant="dstg", d_sem=112, d_ap=16, n_layers=6, n_heads=4)
    model = build_model(cfg)            # seeded random init (cfg.seed)
    ModelConfig.from_json(cfg.to_json()) == cfg

Variants (see PAPER.md):
- ``dstg``: two residual streams, AP (``d_ap``) and semantic (``d_sem``); per-stream q/k of the same
  per-head size, T5-bucket relative bias, MLM head on the semantic stream only.
- ``rope``: NeoBERT with rotary q/k.  ``ap``: a learned absolute position table added to the token
  embedding (entangled).  ``rp``: the same learned T5-bucket relative bias as DSTG, no AP at all.

The relative bias is **bucketed** (T5 style, as the authors' code): ``rp_num_buckets`` buckets shared
between both directions; offsets below ``rp_num_buckets // 4`` get their own bucket, larger ones are
log-spaced up to ``rp_max_distance`` and everything beyond is clipped into the last bucket.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

VARIANTS = ("dstg", "rope", "ap", "rp")
# No model of this toolkit comes near this; a config past it is a typo (vocab_size 1e12, a factor of
# 100000), refused here in one line instead of an allocator error for petabytes.
MAX_MODEL_BYTES = 2**40


def _multiple_of_8(x: float) -> int:
    return int(8 * ((int(x) + 7) // 8))


@dataclass
class ModelConfig:
    """Architecture of one encoder.

    Args:
        variant: one of ``dstg``, ``rope``, ``ap``, ``rp``.
        vocab_size: size of the token vocabulary (tokenizer's, specials included).
        max_positions: longest sequence the model accepts (size of the AP table).
        n_layers, n_heads: depth and heads per layer.
        d_model: residual width of a baseline. For ``dstg`` it is derived as ``d_sem + d_ap``.
        d_sem, d_ap: DSTG's semantic and absolute-position stream widths (both divisible by ``n_heads``:
            each head carries ``d_sem / n_heads`` semantic and ``d_ap / n_heads`` AP value dims).
        d_head: per-head query/key size (for DSTG, each stream is projected to this same size).
            Default ``d_model // n_heads``.
        d_mlp: SwiGLU hidden size. Default NeoBERT's ``multiple_of_8(2/3 * 4 * d_model)``. DSTG splits it
            between streams in proportion to their widths (AP share rounded down to a multiple of 8).
        rp_num_buckets, rp_max_distance: T5-style bucketed relative bias (``dstg`` and ``rp``).
        rope_theta: rotary base (``rope``).
        norm_eps: RMSNorm epsilon.  init_std: std of the normal init of every weight matrix/table.
        residual_from_normed: DSTG only. The authors' code carries the *normed* stream forward as the
            residual (x <- norm(x) + f(norm(x))). False (default) is standard pre-norm.
        pad_token_id: id used for padding (ignored by attention through the mask).
        seed: seed of the random initialisation in ``build_model``.
    """

    variant: str = "dstg"
    vocab_size: int = 8192
    max_positions: int = 256
    n_layers: int = 6
    n_heads: int = 4
    d_model: int | None = None
    d_sem: int | None = None
    d_ap: int | None = None
    d_head: int | None = None
    d_mlp: int | None = None
    rp_num_buckets: int = 32
    rp_max_distance: int = 128
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    init_std: float = 0.02
    residual_from_normed: bool = False
    pad_token_id: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f"ModelConfig.variant: unknown variant {self.variant!r}; expected one of {', '.join(VARIANTS)}")
        for name in ("vocab_size", "max_positions", "n_layers", "n_heads", "rp_num_buckets", "rp_max_distance"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"ModelConfig.{name}: must be a positive integer, got {value!r}")
        if self.variant == "dstg":
            for name in ("d_sem", "d_ap"):
                value = getattr(self, name)
                if not isinstance(value, int) or value <= 0:
                    raise ValueError(f"ModelConfig.{name}: variant 'dstg' needs a positive integer {name}, got {value!r}")
                if value % self.n_heads:
                    raise ValueError(f"ModelConfig.{name}: {value} is not divisible by n_heads={self.n_heads}")
            if self.d_model is not None and self.d_model != self.d_sem + self.d_ap:
                raise ValueError(
                    f"ModelConfig.d_model: for 'dstg' d_model must equal d_sem + d_ap = {self.d_sem + self.d_ap}, got {self.d_model}"
                )
            self.d_model = self.d_sem + self.d_ap
        else:
            if self.d_sem is not None or self.d_ap is not None:
                raise ValueError(f"ModelConfig.d_sem: d_sem/d_ap only apply to variant 'dstg', not {self.variant!r}; set d_model")
            if not isinstance(self.d_model, int) or self.d_model <= 0:
                raise ValueError(f"ModelConfig.d_model: variant {self.variant!r} needs a positive integer d_model, got {self.d_model!r}")
            if self.residual_from_normed:
                raise ValueError("ModelConfig.residual_from_normed: the normed-residual quirk only exists in variant 'dstg'")
        if self.d_head is None:
            if self.d_model % self.n_heads:
                raise ValueError(f"ModelConfig.d_head: d_model={self.d_model} is not divisible by n_heads={self.n_heads}; set d_head")
            self.d_head = self.d_model // self.n_heads
        if not isinstance(self.d_head, int) or self.d_head <= 0:
            raise ValueError(f"ModelConfig.d_head: must be a positive integer, got {self.d_head!r}")
        if self.variant == "rope" and self.d_head % 2:
            raise ValueError(f"ModelConfig.d_head: rotary embeddings need an even d_head, got {self.d_head}")
        if self.d_mlp is None:
            self.d_mlp = _multiple_of_8(2 / 3 * 4 * self.d_model)
        if not isinstance(self.d_mlp, int) or self.d_mlp <= 0:
            raise ValueError(f"ModelConfig.d_mlp: must be a positive integer, got {self.d_mlp!r}")
        if self.variant == "dstg" and not 0 < self.d_mlp_ap < self.d_mlp:
            raise ValueError(f"ModelConfig.d_mlp: {self.d_mlp} is too small to give the AP stream at least 8 hidden units")
        if self.rp_num_buckets % 2 or self.rp_num_buckets < 4:
            raise ValueError(f"ModelConfig.rp_num_buckets: must be an even number >= 4, got {self.rp_num_buckets}")
        if self.rope_theta <= 0:
            raise ValueError(f"ModelConfig.rope_theta: must be positive, got {self.rope_theta}")
        if not self.norm_eps > 0 or not self.init_std > 0:
            raise ValueError("ModelConfig.norm_eps: norm_eps and init_std must be positive")
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise ValueError(f"ModelConfig.pad_token_id: {self.pad_token_id} is outside the vocabulary (size {self.vocab_size})")
        if self.memory_bytes() > MAX_MODEL_BYTES:
            raise ValueError(f"ModelConfig: these sizes need about {self.memory_bytes() / 1e12:,.0f} TB of memory "
                             f"(vocab_size={self.vocab_size}, max_positions={self.max_positions}, d_model={self.d_model}, "
                             f"n_layers={self.n_layers}); check them")

    def memory_bytes(self) -> int:
        """A generous estimate of the float32 weights and position buffers of the built model, in bytes."""
        d = self.d_model
        weights = 2 * self.vocab_size * d + self.n_layers * (4 * d * d + 3 * d * self.d_mlp) + self.max_positions * d
        buffers = 0
        if self.variant in ("dstg", "rp"):  # the [max_positions, max_positions] bucket index of each layer
            buffers = self.n_layers * 8 * self.max_positions ** 2
        elif self.variant == "rope":
            buffers = 16 * self.max_positions * self.d_head
        return 4 * weights + buffers

    # --- derived sizes -------------------------------------------------------------------------
    @property
    def d_mlp_ap(self) -> int:
        """AP share of the DSTG SwiGLU hidden units (proportional, rounded down to a multiple of 8)."""
        return max(8, 8 * int(self.d_mlp * self.d_ap / self.d_model // 8)) if self.variant == "dstg" else 0

    @property
    def d_mlp_sem(self) -> int:
        return self.d_mlp - self.d_mlp_ap

    @property
    def subspaces(self) -> tuple[str, ...]:
        """Subspaces of a hidden state that can be read: DSTG splits into AP and semantic streams."""
        return ("ap", "sem", "full") if self.variant == "dstg" else ("full",)

    @property
    def has_ap_table(self) -> bool:
        return self.variant in ("dstg", "ap")

    # --- serialisation -------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "ModelConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"ModelConfig: unknown field(s) {', '.join(unknown)}")
        return cls(**data)

    def to_json(self, path: str | Path | None = None) -> str:
        text = json.dumps(self.to_dict(), indent=2, sort_keys=True)
        if path is not None:
            Path(path).write_text(text + "\n")
        return text

    @classmethod
    def from_json(cls, text_or_path: str | Path) -> "ModelConfig":
        text = str(text_or_path)
        if not text.lstrip().startswith("{"):
            text = Path(text_or_path).read_text()
        return cls.from_dict(json.loads(text))
