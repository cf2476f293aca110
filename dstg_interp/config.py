"""`ModelConfig`: one validated dataclass describing DSTG-NeoBERT, its three baselines and the NoPE floor.

    from dstg_interp import ModelConfig, build_model
    cfg = ModelConfig(variant="dstg", d_sem=112, d_ap=16, n_layers=6, n_heads=4)
    model = build_model(cfg)            # seeded random init (cfg.seed)
    ModelConfig.from_json(cfg.to_json()) == cfg

Variants (README, "The models"):
- ``dstg``: two residual streams, AP (``d_ap``) and semantic (``d_sem``); per-stream q/k of the same
  per-head size, T5-bucket relative bias, MLM head on the semantic stream only.
- ``rope``: NeoBERT with rotary q/k.  ``ap``: a learned absolute position table added to the token
  embedding (entangled).  ``rp``: the same learned T5-bucket relative bias as DSTG, no AP at all.
- ``nope``: the same NeoBERT block with no positional input at all (no table, no rotation, no bias).  Its
  attention is bidirectional, so it is permutation-equivariant: permuting the tokens permutes its outputs.
  It is the floor of the position readings: what an MLM encoder recovers of position from content alone.

The relative bias is **bucketed** (T5 style, as the authors' code): ``rp_num_buckets`` buckets shared
between both directions; offsets below ``rp_num_buckets // 4`` get their own bucket, larger ones are
log-spaced up to ``rp_max_distance`` and everything beyond is clipped into the last bucket.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .variants import VARIANTS, Variant, variant_row, variants_where


def _named(**fields) -> str:
    """The variants with these fields, quoted, for a message: ``'dstg'`` (or ``'dstg' / 'other'``)."""
    return " / ".join(map(repr, variants_where(**fields)))


def plain(value):
    """JSON types all the way down: paths as strings, tuples as lists."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


def config_or_fields(config_class, config, fields: dict):
    """``config`` as it is, or a ``config_class`` built from the keyword ``fields``: a function that takes its
    config whole also takes the config's fields as keywords (``extract(model, seqs, out, dtype="float32")``)."""
    if config is not None and fields:
        raise TypeError(f"pass a {config_class.__name__} or its fields as keywords, not both "
                        f"(got config= and {', '.join(sorted(fields))})")
    if config is None:
        return config_class(**fields)
    if not isinstance(config, config_class):
        raise TypeError(f"config must be a {config_class.__name__}, got {type(config).__name__}")
    return config


class ConfigIO:
    """The one way every config dataclass of the toolkit is saved and read back.

        cfg.to_dict()                      # JSON types (tuples as lists, paths as strings), nested configs too
        type(cfg).from_dict(d)             # unknown fields are one clear error (ERROR, a ValueError)
        cfg.to_json(path=None) -> str      # the text; written to ``path`` when given
        type(cfg).from_json(text_or_path)
    """

    ERROR: type[Exception] = ValueError  # what an unknown field raises (a store's config raises StoreError)
    JSON_SORT_KEYS = False

    def to_dict(self) -> dict:
        return plain(dataclasses.asdict(self))  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, data: dict):
        unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})  # type: ignore[arg-type]
        if unknown:
            raise cls.ERROR(f"{cls.__name__}: unknown field(s) {', '.join(unknown)}")
        return cls(**data)

    def to_json(self, path: str | Path | None = None) -> str:
        text = json.dumps(self.to_dict(), indent=2, sort_keys=self.JSON_SORT_KEYS)
        if path is not None:
            Path(path).write_text(text + "\n")
        return text

    @classmethod
    def from_json(cls, text_or_path: str | Path):
        text = str(text_or_path)
        if not text.lstrip().startswith("{"):
            text = Path(text_or_path).read_text()
        return cls.from_dict(json.loads(text))


# --- the flags every command shares, as fields ----------------------------------------------------
# A config field made by one of these gets the shared flag of its kind from dstg_interp/cli/config_args.py
# (one help text and one parser per flag, dstg_interp/cli/flags.py); any other field gets a flag built
# from its own type.  The kind is carried by the field ("shared" metadata), never read off its name.
SHARED_FLAGS = ("out", "device", "seed", "threads", "layers", "subspaces", "quiet", "model")


def _shared(kind: str, default=None, default_factory=None, **metadata) -> Any:
    metadata = {"shared": kind, "flag": f"--{kind}", **{k: v for k, v in metadata.items() if v is not None}}
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def out_field(default: str | None = None, *, help: str | None = None, shown: str | None = None,
              required: bool | None = None) -> Any:
    """``--out``: where the output is written; ``help`` says what the folder (or file) holds."""
    return _shared("out", default, help=help, shown=shown, required=required)


def device_field(default: str = "cpu", *, help: str | None = None, shown: str | None = None) -> Any:
    """``--device``: cpu, cuda or cuda:N; ``help`` adds what runs there."""
    return _shared("device", default, help=help, shown=shown)


def seed_field(default: int = 0, *, shown: str | None = None) -> Any:
    """``--seed``: 0..MAX_SEED."""
    return _shared("seed", default, shown=shown)


def threads_field(default: int | None = None, *, shown: str | None = None) -> Any:
    """``--threads``: PyTorch CPU threads (None: PyTorch's)."""
    return _shared("threads", default, shown=shown)


def quiet_field() -> Any:
    """``progress: bool = quiet_field()``: progress bars on, ``--quiet`` turns them off."""
    return _shared("quiet", True, invert=True)


def model_field(default: str | None = None, *, required: bool | None = None) -> Any:
    """``--model``, repeatable and listable: a list of model specs (``[default]`` when none is given)."""
    if default is None:
        return _shared("model", default_factory=list, required=required)
    return _shared("model", default_factory=lambda: [default], required=required, model_default=default)


def tokenizer_mismatch_field() -> Any:
    """``--allow-tokenizer-mismatch``: read a model whose tokenizer covers under 90% of its embedding rows
    (refused otherwise: ``dstg_interp.model.files.check_tokenizer_fits``)."""
    return dataclasses.field(default=False, metadata={
        "help": "read a model whose tokenizer covers under 0.9 of its embedding rows (refused otherwise: it looks "
                "like another model's tokenizer); say so only when it is the model's own"})


def model_name_field(help: str) -> Any:
    """``--name``: how the output names the model(s) (``help``); by default what ``dstg_interp.encoders.naming``
    makes of the model spec."""
    return dataclasses.field(default=None, metadata={"help": help, "shown": "the zoo name, hub id, model-card title "
                                                                            "or folder name (dstg_interp.encoders.naming)"})


def layers_field(default=None, *, shown: str | None = None) -> Any:
    """``--layers``: a layer selection in the grammar of ``dstg_interp.encoders.selection`` (``LayerSelection``)."""
    return _shared("layers", default, shown=shown)


def subspaces_field(*, shown: str | None = None) -> Any:
    """``--subspaces``: comma-separated sem, ap, full (None: all the model has)."""
    return _shared("subspaces", None, shown=shown)


# No model of this toolkit comes near this; a config past it is a typo (vocab_size 1e12, a factor of
# 100000), refused here in one line instead of an allocator error for petabytes.
MAX_MODEL_BYTES = 2**40
# Seeds: torch.manual_seed takes up to 2**64 - 1 and numpy's legacy RandomState up to 2**32 - 1; derived seeds
# (``step_seed``, ``seed + RANDOM_INIT_SEED_SHIFT``) must stay inside torch's range too, so every seed flag and
# config field is checked against 0..MAX_SEED before any work.
MAX_SEED = 2**32 - 1
# The streams of random numbers derived from one seed, each named once (no file repeats the literals):
STEP_SEED_STRIDE = 1_000_003  # the masks of training step (or evaluated sequence) i: seed * STRIDE + i
OFFSET_SEED_SHIFT = 7  # that step's random position offsets: its mask seed + 7
VALIDATION_MASK_SEED = 10_000_019  # the fixed validation masks of batch b: VALIDATION_MASK_SEED + b
RANDOM_INIT_SEED_SHIFT = 1_000_003  # a random-init control model: the trained model's seed + shift


def step_seed(seed: int, index: int) -> int:
    """The seed of step (or sequence) ``index`` of a run seeded by ``seed``: the same step, the same masks."""
    return seed * STEP_SEED_STRIDE + index


def check_seed(value, name: str = "seed") -> int:
    """``value`` if it is a usable seed (an integer in 0..MAX_SEED); else ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEED:
        raise ValueError(f"{name}: expected a seed from 0 to {MAX_SEED}, got {value!r}")
    return value


def _multiple_of_8(x: float) -> int:
    return int(8 * ((int(x) + 7) // 8))


@dataclass
class ModelConfig(ConfigIO):
    """Architecture of one encoder.

    Args:
        variant: one of ``dstg``, ``rope``, ``ap``, ``rp``, ``nope`` (no positional input: the floor).
        vocab_size: size of the token vocabulary (tokenizer's, specials included).
        max_positions: longest sequence the model accepts (size of the AP table; for ``nope``, only the cap).
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
        pos_init_std: std of the learned absolute-position table's init (``dstg``, ``ap``); None = init_std.
        tie_embeddings: the MLM head's weight is the token embedding (BERT's choice; NeoBERT unties).
        residual_from_normed: DSTG only. The authors' code carries the *normed* stream forward as the
            residual (x <- norm(x) + f(norm(x))). False (default) is standard pre-norm.
        rp_bias: ``dstg`` only. False builds DSTG without the relative-position term: the attention logit is
            q_sem.k_sem + q_ap.k_ap alone, no bias table, no ``hook_logits_rp`` (the authors' "no RP" ablation).
        rp_locality_init: ``dstg``/``rp`` only. None (default): the relative bias starts at zero (the authors'
            code). A strength s > 0 starts each head's bias at -s * ln(1 + |offset|) of its bucket's offsets: a
            locality prior, so the bias carries attention to near tokens from the first step (the data-form
            study's arm G: does taking locality off the AP table let the table take another shape?).
        rp_zero_boundary: ``dstg``/``rp`` only. True reproduces the authors' transformers fork, which sets
            the first and last rows and columns of the L x L relative bias to zero, L being the *padded*
            length of the batch (so outputs depend on padding). False (default) is their training code.
        mlp_mode: DSTG FFN. ``split`` (default): hidden units are split between the streams, each part
            writing only into its own stream. ``mixed``: one SwiGLU over [sem | AP] whose down-projection
            writes both streams (the authors' published ``mixed_feed_forward`` checkpoint).
        mlp_ap_units: ``split`` DSTG FFN: how many of the ``d_mlp`` hidden units write the AP stream.
            None (default): proportional to the stream widths, rounded down to a multiple of 8. Converted
            checkpoints set it from the file, whose rounding differs.
        mlm_head_input: what the MLM head reads. DSTG: ``sem`` (default) or ``full`` = [sem | AP] (the
            authors' ``use_only_sem_for_decoding=false``; their column order [AP | sem] is permuted when
            converting). Baselines: always ``full``.
        encoder_only: no MLM head (a checkpoint saved without its decoder). Hooks and ``run_with_cache``
            work; asking for logits or passing labels raises ``NoMLMHeadError``.
        source: where converted weights came from (``path``, ``format``, ``sha256``), written by
            ``dstg-convert``; None for models trained here.
        pad_token_id: id used for padding (ignored by attention through the mask).
        seed: seed of the random initialisation in ``build_model``.
    """

    JSON_SORT_KEYS = True

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
    pos_init_std: float | None = None
    tie_embeddings: bool = False
    residual_from_normed: bool = False
    rp_bias: bool = True
    rp_zero_boundary: bool = False
    rp_locality_init: float | None = None
    mlp_mode: str = "split"
    mlp_ap_units: int | None = None
    mlm_head_input: str | None = None
    encoder_only: bool = False
    pad_token_id: int = 0
    seed: int = 0
    source: dict | None = None

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f"ModelConfig.variant: unknown variant {self.variant!r}; expected one of {', '.join(VARIANTS)}")
        spec = self.spec
        for name in ("vocab_size", "max_positions", "n_layers", "n_heads", "rp_num_buckets", "rp_max_distance"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"ModelConfig.{name}: must be a positive integer, got {value!r}")
        check_seed(self.seed, "ModelConfig.seed")
        if spec.ap_stream:
            for name in ("d_sem", "d_ap"):
                value = getattr(self, name)
                if not isinstance(value, int) or value <= 0:
                    raise ValueError(f"ModelConfig.{name}: variant {self.variant!r} needs a positive integer {name}, got {value!r}")
                if value % self.n_heads:
                    raise ValueError(f"ModelConfig.{name}: {value} is not divisible by n_heads={self.n_heads}")
            if self.d_model is not None and self.d_model != self.d_sem + self.d_ap:
                raise ValueError(f"ModelConfig.d_model: for {self.variant!r} d_model must equal d_sem + d_ap = "
                                 f"{self.d_sem + self.d_ap}, got {self.d_model}")
            self.d_model = self.d_sem + self.d_ap
        else:
            if self.d_sem is not None or self.d_ap is not None:
                raise ValueError(f"ModelConfig.d_sem: d_sem/d_ap only apply to variant {_named(ap_stream=True)}, "
                                 f"not {self.variant!r}; set d_model")
            if not isinstance(self.d_model, int) or self.d_model <= 0:
                raise ValueError(f"ModelConfig.d_model: variant {self.variant!r} needs a positive integer d_model, got {self.d_model!r}")
            if self.residual_from_normed:
                raise ValueError("ModelConfig.residual_from_normed: the normed-residual quirk only exists in variant "
                                 f"{_named(ap_stream=True)}")
        if self.d_head is None:
            if self.d_model % self.n_heads:
                raise ValueError(f"ModelConfig.d_head: d_model={self.d_model} is not divisible by n_heads={self.n_heads}; set d_head")
            self.d_head = self.d_model // self.n_heads
        if not isinstance(self.d_head, int) or self.d_head <= 0:
            raise ValueError(f"ModelConfig.d_head: must be a positive integer, got {self.d_head!r}")
        if spec.rotary and self.d_head % 2:
            raise ValueError(f"ModelConfig.d_head: rotary embeddings need an even d_head, got {self.d_head}")
        if self.d_mlp is None:
            self.d_mlp = _multiple_of_8(2 / 3 * 4 * self.d_model)
        if not isinstance(self.d_mlp, int) or self.d_mlp <= 0:
            raise ValueError(f"ModelConfig.d_mlp: must be a positive integer, got {self.d_mlp!r}")
        self._check_conversion_options()
        if self.rp_num_buckets % 2 or self.rp_num_buckets < 4:
            raise ValueError(f"ModelConfig.rp_num_buckets: must be an even number >= 4, got {self.rp_num_buckets}")
        if self.rope_theta <= 0:
            raise ValueError(f"ModelConfig.rope_theta: must be positive, got {self.rope_theta}")
        if not self.norm_eps > 0 or not self.init_std > 0:
            raise ValueError("ModelConfig.norm_eps: norm_eps and init_std must be positive")
        if self.rp_locality_init is not None and (not self.rp_locality_init > 0 or self.rp_locality_init > 100
                                                  or not spec.relative_bias or not self.rp_bias):
            raise ValueError(f"ModelConfig.rp_locality_init: a strength in (0, 100] for a model with a relative bias "
                             f"({', '.join(variants_where(relative_bias=True))}), got {self.rp_locality_init} for {self.variant!r}")
        if self.pos_init_std is not None and not self.pos_init_std > 0:
            raise ValueError(f"ModelConfig.pos_init_std: must be positive (or None for init_std), got {self.pos_init_std}")
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
        if self.spec.relative_bias:  # the [max_positions, max_positions] bucket index of each layer
            buffers = self.n_layers * 8 * self.max_positions ** 2
        elif self.spec.rotary:
            buffers = 16 * self.max_positions * self.d_head
        return 4 * weights + buffers

    def _check_conversion_options(self) -> None:
        """The options that let converted checkpoints of other authors run exactly (model/formats.py)."""
        for name in ("rp_bias", "rp_zero_boundary", "encoder_only", "residual_from_normed"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"ModelConfig.{name}: must be true or false, got {getattr(self, name)!r}")
        spec = self.spec
        if not self.rp_bias and not spec.ap_stream:  # an AP stream's model keeps position without the bias
            raise ValueError(f"ModelConfig.rp_bias: only variant {_named(ap_stream=True)} can drop its relative bias "
                             f"(for {self.variant!r} leave it true: {_named(ap_stream=False, relative_bias=True)} is "
                             f"the bias, the others have none)")
        if self.rp_zero_boundary and (not spec.relative_bias or not self.rp_bias):
            raise ValueError(f"ModelConfig.rp_zero_boundary: this {self.variant!r} model has no relative bias")
        if self.mlp_mode not in ("split", "mixed"):
            raise ValueError(f"ModelConfig.mlp_mode: expected 'split' or 'mixed', got {self.mlp_mode!r}")
        if self.mlp_mode == "mixed" and not spec.ap_stream:
            raise ValueError(f"ModelConfig.mlp_mode: 'mixed' only exists for variant {_named(ap_stream=True)}, "
                             f"not {self.variant!r}")
        if self.mlp_ap_units is not None:
            if not spec.ap_stream or self.mlp_mode != "split":
                raise ValueError(f"ModelConfig.mlp_ap_units: only the 'split' FFN of variant {_named(ap_stream=True)} "
                                 "divides its hidden units")
            if not isinstance(self.mlp_ap_units, int) or isinstance(self.mlp_ap_units, bool) or not 0 < self.mlp_ap_units < self.d_mlp:
                raise ValueError(f"ModelConfig.mlp_ap_units: must be an integer in [1, d_mlp - 1] = [1, {self.d_mlp - 1}], "
                                 f"got {self.mlp_ap_units!r}")
        if spec.ap_stream and self.mlp_mode == "split" and not 0 < self.d_mlp_ap < self.d_mlp:
            raise ValueError(f"ModelConfig.d_mlp: {self.d_mlp} is too small to give the AP stream at least 8 hidden units")
        if self.mlm_head_input is None:
            self.mlm_head_input = "sem" if spec.ap_stream else "full"
        allowed = ("sem", "full") if spec.ap_stream else ("full",)
        if self.mlm_head_input not in allowed:
            raise ValueError(f"ModelConfig.mlm_head_input: variant {self.variant!r} allows {' or '.join(map(repr, allowed))}, "
                             f"got {self.mlm_head_input!r}")
        if self.tie_embeddings and (self.encoder_only or (spec.ap_stream and self.mlm_head_input != "sem")):
            raise ValueError("ModelConfig.tie_embeddings: the head must read the token-embedding width (no encoder_only, "
                             "and mlm_head_input='sem' for dstg)")
        if self.source is not None and not (isinstance(self.source, dict) and all(isinstance(k, str) for k in self.source)):
            raise ValueError(f"ModelConfig.source: expected a JSON object (path, format, sha256) or null, got {self.source!r}")

    # --- derived sizes -------------------------------------------------------------------------
    @property
    def d_mlp_ap(self) -> int:
        """AP share of the split DSTG SwiGLU hidden units: ``mlp_ap_units``, else proportional to the widths
        (rounded down to a multiple of 8). 0 for baselines and the mixed FFN, whose units write both streams."""
        if not self.spec.ap_stream or self.mlp_mode != "split":
            return 0
        if self.mlp_ap_units is not None:
            return self.mlp_ap_units
        return max(8, 8 * int(self.d_mlp * self.d_ap / self.d_model // 8))

    @property
    def d_mlp_sem(self) -> int:
        return self.d_mlp - self.d_mlp_ap

    @property
    def subspaces(self) -> tuple[str, ...]:
        """Subspaces of a hidden state that can be read: DSTG splits into AP and semantic streams."""
        return ("ap", "sem", "full") if self.spec.ap_stream else ("full",)

    @property
    def spec(self) -> Variant:
        """This variant's row of the variants table (``dstg_interp.variants``): where position enters, its class."""
        return variant_row(self.variant)

    @property
    def has_ap_table(self) -> bool:
        return self.spec.position_table

