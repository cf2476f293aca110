"""MLM pretraining of any variant (nanoGPT-style: one file, top to bottom).

    dstg-train --variant dstg --out runs/dstg --steps 3000               # one process
    torchrun --nproc_per_node 2 -m dstg_interp.cli.train --variant dstg --out runs/dstg   # DDP (gloo/nccl)
    dstg-train --out runs/dstg --resume                                   # continue exactly
    dstg-train --config runs/dstg/train_config.json --out runs/dstg2      # a saved recipe

Data: corpus -> structured sequences (``data/prepare.py``, cached; the train/validation split is seeded by
``data_seed`` so every training seed sees the same split).  Each epoch is cut into length-bucketed batches
(``LengthBucketedBatches``: a permutation seeded by (seed, epoch), sorted by length inside chunks of 64
batches, batch order shuffled), so a batch pads little and a full-length batch runs without an attention
mask (``--batch-tokens N``: batches cut to about N token positions each instead of a fixed number of
sequences); each step masks its batch with a generator seeded by (seed, step) and gives every rank its rows, so
the data a step sees depends on the step number only: ``--resume`` and DDP reproduce a single
uninterrupted run.  The next batch is collated and masked in a background thread while the current step
runs.  Masking as NeoBERT: 20% of tokens, all replaced by [MASK].  ``--compile`` compiles the encoder
and the masked-token loss with ``torch.compile`` (the input checks and the selection of the masked tokens
stay eager, between them; ``compile_for_training``); by default it is on for runs of at least
``COMPILE_MIN_STEPS`` steps, where its one-time cost (three graphs, much cheaper with a warm inductor
cache) pays back (measured against the eager loop: benchmarks/bench_train_loop.py, benchmarks/README.md),
and off, with a note, where inductor cannot build kernels (no C++ compiler).

Outputs in ``--out``: ``train_config.json``, ``log.jsonl`` (one JSON line per logged step and per
validation), and ``checkpoint/`` (weights, config, tokenizer, optimizer state, step) rewritten atomically
every ``save_every`` steps and at the end; Ctrl-C leaves the last complete checkpoint as it was.
"""

from __future__ import annotations

import bisect
import concurrent.futures
import json
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from tqdm.auto import tqdm

from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file

from .config import (OFFSET_SEED_SHIFT, VALIDATION_MASK_SEED, ConfigIO, ModelConfig, check_seed, device_field,
                     out_field, quiet_field, seed_field, step_seed, threads_field)
from .data.corpora import ZOO_SPLIT_SEED, ZOO_VAL_FRACTION
from .data.mlm import collate, mask_tokens, pad_width_to_multiple
from .data.prepare import PreparedData, prepare_data
from .data.structure import DEFAULT_MAX_LENGTH
from .data.tokenizer import INITIAL_ALPHABET, SPECIAL_TOKENS, load_tokenizer
from .io import clean_stale_temporaries, write_text_atomic
from .model.checkpoint import (RUN_CHECKPOINT, CheckpointError, build_model, load_model, save_checkpoint,
                               zoo_architecture)
from .model.files import TOKENIZER_FILE
from .torchrun_env import torchrun_environment
from .variants import variants_where

CHECKPOINT_DIR, LOG_FILE, CONFIG_FILE = RUN_CHECKPOINT, "log.jsonl", "train_config.json"
DEFAULT_WARMUP_STEPS = 200  # the most warm-up a default run gets: 10% of max_steps, at most this
OPTIMIZER_FILE, STATE_FILE = "optimizer.safetensors", "train_state.json"
# Fields that may differ on --resume without changing the result.
RESUMABLE_DIFFERENCES = {"out_dir", "device", "threads", "progress", "compile"}
SCHEDULES = ("cosine", "linear", "constant")
COMPILE_MIN_STEPS = 1000  # below this a run spends more on compiling than compiling saves
# Under bf16 a CPU matmul goes through oneDNN, which builds (JIT-compiles) a kernel for each new shape:
# unpadded, every new batch width and masked-token count pays that, about a third of a bf16 step
# (benchmarks/README.md).  Padded to multiples of 16 the shapes come in a few sizes.
BF16_PAD_MULTIPLE = 16
# A trained WordPiece always holds the specials, the ASCII alphabet and its 36 "##" continuations:
# a smaller vocab_size would be silently exceeded.
MIN_VOCAB_SIZE = len(SPECIAL_TOKENS) + len(INITIAL_ALPHABET) + 36


@dataclass
class TrainConfig(ConfigIO):
    """Everything a pretraining run depends on; saved as ``train_config.json`` beside its outputs.

    ``model`` holds ModelConfig fields; ``vocab_size`` comes from the data, the model's ``max_positions``
    from ``max_positions`` (default: ``max_length``).  ``random_offset`` (the authors' training option, DSTG and
    AP-NeoBERT): each sequence reads the learned position table from a random start, uniform over
    [0, max_positions - batch width], so a table longer than the training sequences is trained everywhere.
    ``batch_size`` is the global batch (split over DDP ranks).  ``schedule``: linear warm-up for
    ``warmup_steps`` then cosine or linear decay to ``min_lr_ratio * lr`` at ``max_steps``, or
    ``constant``: the peak rate until the last ``decay_fraction`` of the steps, then a linear decay.
    ``seed`` seeds the model's initialisation (unless ``model`` sets its own ``seed``), the data order and
    the masks; ``data_seed`` seeds the train/validation split and so the tokenizer (keep it fixed across
    seeds to compare runs on the same held-out documents).  ``bucket_by_length``: batches of similar
    lengths (less padding); ``compile``: ``torch.compile`` the encoder (None: on for runs of at least
    ``COMPILE_MIN_STEPS`` steps when a C++ compiler is there, see ``use_compile``).

    ``batch_tokens`` (None: off, every step a batch of ``batch_size`` sequences): token-budget batches.  Each
    length-sorted chunk of ``LengthBucketedBatches`` (still ``64 x batch_size`` sequences) is cut greedily so
    that (sequences in the batch) x (its longest sequence) <= ``batch_tokens``: every step then carries about
    ``batch_tokens`` token positions (padding included), and a batch of short sequences holds more of them.
    What changes: the number of sequences per step varies, and so the number of steps per epoch (the plan is
    still a function of lengths, budget, seed and epoch, so ``--resume`` and DDP see the same batches);
    ``max_steps``, warm-up and the schedule stay in steps; the masking and the loss (the mean over a batch's
    masked tokens) are as before; ``batch_size`` still sets the validation batches and the chunk size.  The
    budget must hold one full-length sequence (``>= max_length``) and needs ``bucket_by_length``.  Under DDP
    a batch of fewer sequences than ranks is split as ``rank_share`` says (the others step on a placeholder
    with no loss).
    """

    # The metadata makes dstg-train's flags (dstg_interp/cli/config_args.py): a field is written once.
    out_dir: str = out_field("runs/dstg", help="a folder for checkpoint/, log.jsonl, train_config.json",
                             shown="--config's, else runs/dstg")
    model: dict = field(default_factory=lambda: zoo_architecture("dstg"),
                        metadata={"cli": False})  # dstg-train: --variant, --d-model, --d-ap, --n-layers, --n-heads
    corpus: str = field(default="en-mix", metadata={"help": "en-mix, a folder of .txt, a .jsonl, or hf:NAME[:CONFIG]:SPLIT"})
    max_docs: int | None = field(default=None, metadata={"min": 1, "help": "use the first N documents only"})
    max_length: int = field(default=DEFAULT_MAX_LENGTH, metadata={"help": "tokens per training sequence"})
    max_positions: int | None = field(default=None, metadata={"help": "position table size", "shown": "--max-length"})
    random_offset: bool = field(default=False, metadata={
        "help": "shift each sequence's absolute positions randomly (dstg/ap; with --max-positions > --max-length)"})
    windows: bool = field(default=True, metadata={
        "flag": "--no-windows", "invert": True, "help": "truncate long documents instead of windowing them"})
    vocab_size: int = field(default=8192, metadata={"help": "WordPiece vocabulary trained on the training split"})
    tokenizer: str | None = field(default=None, metadata={"help": "reuse this tokenizer.json instead of training one"})
    val_fraction: float = field(default=ZOO_VAL_FRACTION, metadata={"help": "share of documents held out for validation"})
    batch_size: int = field(default=32, metadata={"help": "global batch (split over DDP ranks)"})
    batch_tokens: int | None = field(default=None, metadata={
        "min": 1, "metavar": "N", "help": "token-budget batches: each step as many sequences as fit in N token "
                                          "positions (sequences x the batch's longest); --batch-size then sets the "
                                          "validation batches and the chunk size only",
        "shown": "off, --batch-size sequences a step"})
    max_steps: int = field(default=2000, metadata={"flag": "--steps", "min": 1, "help": "optimizer steps"})
    lr: float = field(default=1e-3, metadata={"help": "peak learning rate"})
    min_lr_ratio: float = field(default=0.1, metadata={"help": "final learning rate / peak (cosine, linear, constant)"})
    betas: tuple[float, float] = field(default=(0.9, 0.98), metadata={"help": "AdamW betas"})
    weight_decay: float = field(default=0.1, metadata={"help": "AdamW weight decay (matrices and embeddings)"})
    warmup_steps: int | None = field(default=None, metadata={"help": "linear warm-up steps", "shown": "a tenth of --steps, at most 200"})
    schedule: str = field(default="cosine", metadata={"choices": list(SCHEDULES), "help": "learning-rate schedule"})
    decay_fraction: float = field(default=0.2, metadata={
        "help": "constant schedule: the final share of steps that decays"})
    grad_clip: float = field(default=1.0, metadata={"help": "gradient-norm clip"})
    mask_prob: float = field(default=0.2, metadata={"help": "share of tokens masked"})
    mask_strategy: str = field(default="all", metadata={
        "choices": ["all", "80-10-10"], "help": "all masked tokens to [MASK] (NeoBERT) or BERT's 80-10-10"})
    bf16: bool = field(default=False, metadata={"help": "bfloat16 autocast"})
    pad_to_multiple_of: int | None = field(default=None, metadata={
        "min": 1, "metavar": "N", "help": "pad each batch's width (up to --max-length) and its count of masked "
                                          "tokens to a multiple of N; the loss and gradients stay those of the "
                                          "unpadded batch",
        "shown": f"{BF16_PAD_MULTIPLE} with --bf16, else 1 (no padding)"})
    seed: int = seed_field(shown="--config's, else 0; model init, data order and masks")
    data_seed: int = field(default=ZOO_SPLIT_SEED, metadata={"seed": True, "help": "train/validation split (keep fixed to compare seeds)"})
    bucket_by_length: bool = field(default=True, metadata={
        "flag": "--no-bucket-by-length", "invert": True, "help": "batches in corpus order, not by length"})
    compile: bool | None = field(default=None, metadata={
        "negatable": True, "help": "torch.compile the encoder",
        "shown": f"on for runs of at least {COMPILE_MIN_STEPS} steps"})
    eval_every: int = field(default=250, metadata={"help": "steps between validations"})
    eval_batches: int = field(default=16, metadata={"help": "validation batches"})
    save_every: int = field(default=500, metadata={"help": "steps between checkpoints"})
    log_every: int = field(default=10, metadata={"help": "steps between log lines"})
    save_dtype: str = field(default="float32", metadata={
        "choices": ["float32", "float16", "bfloat16"], "help": "weights dtype of the checkpoint"})
    device: str = device_field(shown="--config's, else cpu")
    threads: int | None = threads_field()
    progress: bool = quiet_field()

    def __post_init__(self) -> None:
        self.betas = tuple(self.betas)
        for name in ("max_length", "batch_size", "max_steps", "eval_every", "eval_batches", "save_every", "log_every", "vocab_size"):
            if int(getattr(self, name)) <= 0:
                raise ValueError(f"TrainConfig.{name}: must be positive, got {getattr(self, name)}")
        if self.warmup_steps is None:  # scaled to the run, so a short run is not refused for a long default
            self.warmup_steps = min(DEFAULT_WARMUP_STEPS, int(self.max_steps) // 10)
        if not 0 <= self.warmup_steps < self.max_steps:
            raise ValueError(f"TrainConfig.warmup_steps: must be in [0, max_steps={self.max_steps}), got {self.warmup_steps}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"TrainConfig.schedule: one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        if not 0 < self.decay_fraction <= 1:
            raise ValueError(f"TrainConfig.decay_fraction: must be in (0, 1], got {self.decay_fraction}")
        for name in ("seed", "data_seed"):
            check_seed(getattr(self, name), f"TrainConfig.{name}")
        if self.mask_strategy not in ("all", "80-10-10"):
            raise ValueError(f"TrainConfig.mask_strategy: 'all' or '80-10-10', got {self.mask_strategy!r}")
        if not 0 < self.mask_prob < 1:
            raise ValueError(f"TrainConfig.mask_prob: must be in (0, 1), got {self.mask_prob}")
        if self.save_dtype not in ("float32", "float16", "bfloat16"):
            raise ValueError(f"TrainConfig.save_dtype: float32, float16 or bfloat16, got {self.save_dtype!r}")
        if self.vocab_size < MIN_VOCAB_SIZE and self.tokenizer is None:
            raise ValueError(f"TrainConfig.vocab_size: at least {MIN_VOCAB_SIZE} (the special tokens, the ASCII alphabet and "
                             f"its subword continuations), got {self.vocab_size}")
        if self.batch_tokens is not None:
            if int(self.batch_tokens) < self.max_length:
                raise ValueError(f"TrainConfig.batch_tokens: a batch must hold one sequence of max_length={self.max_length} "
                                 f"tokens, got {self.batch_tokens}; set --batch-tokens to at least {self.max_length}")
            if not self.bucket_by_length:
                raise ValueError("TrainConfig.batch_tokens: token-budget batches are cut from length-sorted chunks; "
                                 "drop --no-bucket-by-length or --batch-tokens")
        if self.pad_to_multiple_of is not None and int(self.pad_to_multiple_of) <= 0:
            raise ValueError(f"TrainConfig.pad_to_multiple_of: must be a positive integer (or null for the default), "
                             f"got {self.pad_to_multiple_of}")
        if self.pad_to_multiple_of is not None and int(self.pad_to_multiple_of) > self.max_length:
            # the masked-token count is padded too: unbounded, 1e7 took 22.7 GB before any step (round 4, B7, B6)
            raise ValueError(f"TrainConfig.pad_to_multiple_of (--pad-to-multiple-of): at most max_length="
                             f"{self.max_length}, got {self.pad_to_multiple_of}")
        if self.max_docs is not None and int(self.max_docs) <= 0:
            raise ValueError(f"TrainConfig.max_docs: must be a positive number of documents (or null for all), got {self.max_docs}")
        if self.threads is not None and int(self.threads) <= 0:
            raise ValueError(f"TrainConfig.threads: must be a positive integer (or null for PyTorch's default), got {self.threads}")
        if self.tokenizer is not None and not Path(self.tokenizer).is_file():
            raise ValueError(f"TrainConfig.tokenizer: {self.tokenizer} does not exist; omit it to train one on the corpus")
        if self.device not in ("cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ValueError(f"TrainConfig.device: 'cpu' or 'cuda', got {self.device!r}")
        if self.max_positions is not None and self.max_positions < self.max_length:
            raise ValueError(f"TrainConfig.max_positions: must be >= max_length={self.max_length}, got {self.max_positions}")
        model = self.model_config()  # validates the model fields early, naming the bad one
        if self.random_offset and not model.has_ap_table:
            raise ValueError(f"TrainConfig.random_offset: shifts a learned position table (variant "
                             f"{' or '.join(variants_where(position_table=True))}); a {model.variant!r} model has none")
        if self.random_offset and (self.max_positions or self.max_length) <= self.max_length:
            raise ValueError(f"TrainConfig.random_offset: needs a position table longer than the sequences "
                             f"(max_positions > max_length={self.max_length}), or there is no room to shift; "
                             "set --max-positions")

    def padding_multiple(self) -> int:
        """What ``pad_to_multiple_of`` comes to: the value given, else ``BF16_PAD_MULTIPLE`` under bf16, else 1."""
        if self.pad_to_multiple_of is not None:
            return int(self.pad_to_multiple_of)
        return BF16_PAD_MULTIPLE if self.bf16 else 1

    def model_config(self, vocab_size: int | None = None) -> ModelConfig:
        """The model's config; ``vocab_size`` is the trained tokenizer's (a small corpus can give fewer)."""
        fields = dict(dict(seed=self.seed), **self.model, vocab_size=vocab_size or self.vocab_size,
                      max_positions=self.max_positions or self.max_length)
        return ModelConfig(**fields)


# --- schedule and optimizer ----------------------------------------------------------------------
def learning_rate(cfg: TrainConfig, step: int) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":  # warm-up, stable, then a linear decay over the last decay_fraction
        decay_start = cfg.max_steps - max(1, round(cfg.decay_fraction * cfg.max_steps))
        progress = min(1.0, max(0.0, (step - decay_start) / max(1, cfg.max_steps - decay_start)))
        return cfg.lr * (1 - (1 - cfg.min_lr_ratio) * progress)
    progress = min(1.0, (step - cfg.warmup_steps) / max(1, cfg.max_steps - cfg.warmup_steps))
    shape = 0.5 * (1 + math.cos(math.pi * progress)) if cfg.schedule == "cosine" else 1 - progress
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * shape)


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """Weight decay on matrices and embedding tables; none on norms, biases and the relative-bias table.

    The fused AdamW kernel on CPU and CUDA, which at zoo size is faster than the default multi-tensor one.
    """
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        (decay if param.dim() >= 2 and "rel_bias" not in name else no_decay).append(param)
    groups = [dict(params=decay, weight_decay=cfg.weight_decay), dict(params=no_decay, weight_decay=0.0)]
    fused = next(model.parameters()).device.type in ("cpu", "cuda")
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, fused=fused)


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """AdamW state flattened to named tensors (safetensors, no pickle)."""
    tensors = {}
    for index, state in optimizer.state_dict()["state"].items():
        for key, value in state.items():
            tensors[f"{index}.{key}"] = value if torch.is_tensor(value) else torch.tensor(value)
    return tensors


def load_optimizer_tensors(optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor]) -> None:
    state_dict = optimizer.state_dict()
    state: dict[int, dict] = {}
    for name, value in tensors.items():
        index, key = name.split(".", 1)
        state.setdefault(int(index), {})[key] = value
    state_dict["state"] = state
    optimizer.load_state_dict(state_dict)


def use_compile(cfg: "TrainConfig") -> tuple[bool, str | None]:
    """Whether this run compiles, and a note to print when the default had to leave compilation off."""
    if cfg.compile is not None:
        return cfg.compile, None
    if cfg.max_steps < COMPILE_MIN_STEPS:
        return False, None
    if cfg.device == "cpu" and not any(shutil.which(cc) for cc in ("c++", "g++", "clang++")):
        return False, "note: torch.compile is off: no C++ compiler on PATH for inductor's CPU kernels (install g++ to enable)"
    return True, None


def bf16_is_native(device: torch.device) -> bool:
    """Whether bfloat16 autocast runs natively on ``device``: a GPU that supports it, or a CPU with AVX512-BF16
    or AMX (oneDNN says which); elsewhere autocast emulates it, many times slower than float32."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def bf16_emulation_note(cfg: TrainConfig, device: torch.device) -> str | None:
    """One line when ``--bf16`` will be slow rather than fast: on a CPU without native bfloat16 (AVX512-BF16 or
    AMX; oneDNN reports none) autocast emulates it, and a step took 17x its float32 time on an AVX2 AMD EPYC
    (eager, one thread: 266 vs ~4,500 tokens/s).  The run goes on as asked: bf16 changes the numbers it gives."""
    if not cfg.bf16 or device.type != "cpu" or bf16_is_native(device):
        return None
    capability = torch.backends.cpu.get_cpu_capability()
    return (f"dstg-train: note: --bf16 on a CPU without native bfloat16 ({capability}; no AVX512-BF16/AMX) is "
            "emulated and runs many times slower than float32; drop --bf16 on this machine")


def compile_for_training(model) -> None:
    """``torch.compile`` what a training step runs, in place: the encoder (``encode``) and the masked-token
    MLM loss (``masked_lm_loss``).  The input checks (host-side ``int(tokens.min())``) and the selection of
    the masked tokens (a data-dependent shape) stay eager between them, so neither breaks a graph; hook
    points without hooks trace as identities.

    Length-bucketed batches come in up to ``max_length`` widths, with and without a padding mask, and an
    epoch's last batch is smaller.  Left to itself dynamo compiles a graph for each new case (six for the
    one-epoch run of ``test_train_loop``, each a cold compile).  So the shapes are declared: the batch
    size is symbolic in every graph, the width only in padded batches, the number of masked tokens in the
    loss.  Training then compiles three graphs: the encoder on full-width unpadded batches (most of them,
    with static-width kernels, a little faster than symbolic ones), the encoder on padded batches of any
    width, and the loss.  Validation runs eager (``evaluate``): graphs for ``no_grad`` would not pay back
    their compile time.  A batch of one sequence (a chunk's last token-budget batch may be one, as may an
    epoch's last fixed batch or a DDP placeholder) gets graphs of its own: dynamo specializes a size of 1.
    """
    encode, masked_lm_loss = torch.compile(model.encode), torch.compile(model.masked_lm_loss)

    def compiled_encode(tokens, attention_mask, stop_at_layer, position_offset=None):
        for tensor in (tokens, attention_mask, position_offset):
            if tensor is not None:
                torch._dynamo.maybe_mark_dynamic(tensor, 0)
        if attention_mask is not None:
            torch._dynamo.maybe_mark_dynamic(tokens, 1)
            torch._dynamo.maybe_mark_dynamic(attention_mask, 1)
        return encode(tokens, attention_mask, stop_at_layer, position_offset)

    def compiled_masked_lm_loss(hidden, targets):
        torch._dynamo.maybe_mark_dynamic(hidden, 0)
        torch._dynamo.maybe_mark_dynamic(targets, 0)
        return masked_lm_loss(hidden, targets)

    model.encode, model.masked_lm_loss = compiled_encode, compiled_masked_lm_loss


# --- data order ---------------------------------------------------------------------------------
def global_batch_indices(n_sequences: int, batch_size: int, step: int, seed: int) -> np.ndarray:
    """Indices of the step-th global batch without length bucketing: consecutive slices of a per-epoch
    permutation (the remainder of each epoch is skipped)."""
    batches_per_epoch = n_sequences // batch_size
    if batches_per_epoch == 0:
        raise ValueError(f"only {n_sequences} training sequences for a batch of {batch_size}; lower --batch-size or add text")
    epoch, position = divmod(step, batches_per_epoch)
    order = np.random.default_rng([seed, epoch]).permutation(n_sequences)
    return order[position * batch_size : (position + 1) * batch_size]


class LengthBucketedBatches:
    """The step-th global batch of an epoch plan in which each batch holds sequences of similar length.

    Per epoch: a permutation seeded by (seed, epoch) is cut into chunks of ``chunk_batches x batch_size``
    sequences, each chunk is sorted by length and cut into batches, and the order of all batches is
    shuffled.  Every sequence is in exactly one batch per epoch; a chunk mixes sequences from the whole
    corpus, so a batch is no less random in content than an unbucketed one.  A chunk is cut into batches of
    ``batch_size`` sequences (the epoch's last batch may be smaller), or, with ``batch_tokens``, greedily in
    length order: a batch takes the next sequence while (its sequences) x (its longest) stays within the
    budget (each chunk's last batch, of its longest sequences, may be smaller), so the batches of an epoch carry about the same number of token positions and their count varies
    from epoch to epoch (the cumulative count is kept per epoch, computed as steps reach it).  The plan depends
    on (lengths, batch size, budget, seed, epoch) only, so ``--resume`` and DDP see the same batches.
    """

    def __init__(self, lengths: np.ndarray, batch_size: int, seed: int, chunk_batches: int = 64,
                 batch_tokens: int | None = None):
        self.lengths = np.asarray(lengths)
        self.batch_size, self.seed, self.chunk_batches, self.batch_tokens = batch_size, seed, chunk_batches, batch_tokens
        if len(self.lengths) < batch_size:
            raise ValueError(f"only {len(self.lengths)} training sequences for a batch of {batch_size}; lower --batch-size or add text")
        if batch_tokens is not None and batch_tokens < int(self.lengths.max()):
            raise ValueError(f"batch_tokens={batch_tokens} is less than the longest training sequence "
                             f"({int(self.lengths.max())} tokens): a batch must hold at least one; raise --batch-tokens")
        # every chunk but the last holds whole batches, so an epoch has ceil(n / batch_size) of them
        self.batches_per_epoch = -(-len(self.lengths) // batch_size) if batch_tokens is None else None
        self._epoch: int | None = None
        self._plan: list[np.ndarray] = []
        self._epoch_ends: list[int] = []  # token budget: the steps that end epochs 0, 1, ... (cumulative batch counts)

    def epoch_plan(self, epoch: int) -> list[np.ndarray]:
        order = np.random.default_rng([self.seed, epoch]).permutation(len(self.lengths))
        chunk = self.batch_size * self.chunk_batches
        batches = []
        for start in range(0, len(order), chunk):
            part = order[start : start + chunk]
            part = part[np.argsort(self.lengths[part], kind="stable")]
            if self.batch_tokens is None:
                batches += [part[i : i + self.batch_size] for i in range(0, len(part), self.batch_size)]
            else:
                batches += within_budget(part, self.lengths[part], self.batch_tokens)
        shuffle = np.random.default_rng([self.seed, epoch, 1]).permutation(len(batches))
        return [batches[i] for i in shuffle]

    def _load(self, epoch: int) -> None:
        if epoch != self._epoch:
            self._epoch, self._plan = epoch, self.epoch_plan(epoch)

    def batches_in_epoch(self, epoch: int) -> int:
        if self.batches_per_epoch is not None:
            return self.batches_per_epoch
        return self._epoch_end(epoch) - (self._epoch_end(epoch - 1) if epoch else 0)

    def _epoch_end(self, epoch: int) -> int:
        while len(self._epoch_ends) <= epoch:
            self._load(len(self._epoch_ends))
            self._epoch_ends.append((self._epoch_ends[-1] if self._epoch_ends else 0) + len(self._plan))
        return self._epoch_ends[epoch]

    def locate(self, step: int) -> tuple[int, int]:
        """(epoch, position in that epoch's plan) of ``step``."""
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        if self.batches_per_epoch is not None:
            return divmod(step, self.batches_per_epoch)
        while not self._epoch_ends or self._epoch_ends[-1] <= step:
            self._epoch_end(len(self._epoch_ends))
        epoch = bisect.bisect_right(self._epoch_ends, step)
        return epoch, step - (self._epoch_ends[epoch - 1] if epoch else 0)

    def __call__(self, step: int) -> np.ndarray:
        epoch, position = self.locate(step)
        self._load(epoch)
        return self._plan[position]


def within_budget(part: np.ndarray, lengths: np.ndarray, batch_tokens: int) -> list[np.ndarray]:
    """``part`` (sorted by length; ``lengths`` its lengths) cut greedily: each sequence joins the open batch
    while the batch's sequences x its longest (the one joining: lengths ascend) stay within ``batch_tokens``."""
    batches, first = [], 0
    for i, length in enumerate(lengths.tolist()):
        if (i - first + 1) * length > batch_tokens:
            batches.append(part[first:i])
            first = i
    batches.append(part[first:])
    return batches


def batch_order(train_set, cfg: "TrainConfig"):
    """step -> indices of that step's global batch, bucketed by length unless ``bucket_by_length`` is off."""
    if cfg.bucket_by_length:
        return LengthBucketedBatches(train_set.lengths, cfg.batch_size, cfg.seed, batch_tokens=cfg.batch_tokens)
    return lambda step: global_batch_indices(len(train_set), cfg.batch_size, step, cfg.seed)


def masked_batch(sequences, indices, cfg: TrainConfig, vocab_size: int, generator_seed: int):
    ids, attention_mask, special = collate([sequences[int(i)]["input_ids"] for i in indices])
    generator = torch.Generator().manual_seed(generator_seed)
    masked, labels = mask_tokens(ids, special, generator, mask_prob=cfg.mask_prob, vocab_size=vocab_size, strategy=cfg.mask_strategy)
    return masked, attention_mask, labels


def random_offsets(attention_mask: torch.Tensor, max_positions: int, generator_seed: int) -> torch.Tensor:
    """One start per sequence, uniform over [0, max_positions - padded length] (seeded: resumable)."""
    room = max(max_positions - attention_mask.shape[1], 0)
    draws = torch.rand(attention_mask.shape[0], generator=torch.Generator().manual_seed(generator_seed))
    return (draws * (room + 1)).long().clamp(max=room)


def validation_batches(n_sequences: int, cfg: TrainConfig) -> list[np.ndarray]:
    """Fixed validation batches spread evenly over the validation set (corpora are stored source by
    source, so the first sequences would all come from one source)."""
    n_batches = min(cfg.eval_batches, max(1, n_sequences // cfg.batch_size))
    chosen = np.linspace(0, n_sequences - 1, num=min(n_sequences, n_batches * cfg.batch_size)).round().astype(int)
    return np.array_split(np.unique(chosen), n_batches)


@torch.no_grad()
@torch.compiler.set_stance("force_eager")  # a compiled model runs eager here (see compile_for_training)
def evaluate(model, validation, cfg: TrainConfig, device) -> dict:
    """MLM loss and accuracy on fixed validation batches with fixed masks (comparable across runs)."""
    model.eval()
    total_loss, correct, count = 0.0, 0, 0
    for b, indices in enumerate(validation_batches(len(validation), cfg)):
        ids, mask, labels = masked_batch(validation, indices, cfg, model.config.vocab_size, generator_seed=VALIDATION_MASK_SEED + b)
        ids, mask, labels = pad_width_to_multiple(ids, mask, labels, cfg.padding_multiple(), cfg.max_length)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.bf16):
            out = model(ids.to(device), mask.to(device), labels.to(device), masked_logits_only=True,
                        masked_rows_multiple=cfg.padding_multiple())
        targets = labels[labels != -100].to(device)
        total_loss += float(torch.nn.functional.cross_entropy(out.logits.float(), targets, reduction="sum"))
        correct += int((out.logits.argmax(-1) == targets).sum())
        count += int(targets.numel())
    model.train()
    return dict(val_loss=total_loss / count, val_accuracy=correct / count, val_tokens=count)


# --- distributed helpers ------------------------------------------------------------------------
def init_distributed(cfg: TrainConfig):
    """(rank, world_size, device); under torchrun a process group with gloo (CPU) or nccl (CUDA).  torchrun's
    variables without torchrun are refused in one line (torchrun_env)."""
    rank, world_size = torchrun_environment() or (0, 1)
    if cfg.device.startswith("cuda"):
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        device = torch.device(f"cuda:{local_rank}" if world_size > 1 else cfg.device)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    if cfg.batch_tokens is None and cfg.batch_size % world_size:  # token budgets: any size, see rank_share
        raise ValueError(f"batch_size {cfg.batch_size} is not divisible by the {world_size} processes")
    return rank, world_size, device


def rank_share(ids, mask, labels, offsets, rank: int, world_size: int):
    """This rank's rows of a global batch (rows ``rank``, ``rank + world_size``, ...) and the factor on its
    loss: (ids, mask, labels, offsets, loss_scale); ``loss_scale`` None: the loss as it is.

    A batch of n < world_size sequences (token-budget batches of long sequences, an epoch's last batch)
    leaves ranks n, n+1, ... without a row.  Each of them steps on a placeholder instead: the batch's first
    row with no masked token, so a zero loss and zero gradients through the same collectives as the others.
    The n ranks with a sequence scale their loss by world_size / n, so that DDP's average of the
    world_size gradients is the mean over those n ranks: the step the batch gets on n ranks.  Single
    process and every batch of at least world_size sequences: the rows as they are, no scaling.
    """
    n_rows = ids.shape[0]
    if n_rows >= world_size:
        return (*(t[rank::world_size] for t in (ids, mask, labels)),
                offsets[rank::world_size] if offsets is not None else None, None)
    row = slice(rank, rank + 1) if rank < n_rows else slice(0, 1)
    labels = labels[row] if rank < n_rows else torch.full_like(labels[row], -100)
    return ids[row], mask[row], labels, offsets[row] if offsets is not None else None, world_size / n_rows


def barrier(world_size: int) -> None:
    if world_size > 1:
        dist.barrier()


def prepare_training_data(cfg: TrainConfig, progress: bool = False, cache_dir: str | Path | None = None,
                          tokenizer=None):
    """The cached corpus -> split -> tokenizer -> sequences preparation this run trains on; ``tokenizer``:
    a trained model's own (resuming, evaluating), so its data is found again in that model's token ids."""
    return prepare_data(cfg.corpus, cfg.max_length, cfg.windows, cfg.vocab_size, cfg.val_fraction, cfg.data_seed,
                        cfg.max_docs, cfg.tokenizer, cache_dir=cache_dir, progress=progress, tokenizer=tokenizer)


# --- checkpoints --------------------------------------------------------------------------------
def save_training_checkpoint(model, optimizer, tokenizer, cfg: TrainConfig, step: int, tokens_seen: int, elapsed: float) -> None:
    state = dict(step=step, tokens_seen=tokens_seen, train_seconds=elapsed)
    save_checkpoint(
        model, Path(cfg.out_dir) / CHECKPOINT_DIR, dtype=getattr(torch, cfg.save_dtype), tokenizer=tokenizer,
        extra_files={CONFIG_FILE: cfg.to_dict(), STATE_FILE: state},
        extra_tensors={OPTIMIZER_FILE: optimizer_tensors(optimizer)},
    )


def read_train_config(path: str | Path) -> TrainConfig:
    """A saved ``train_config.json``; a relative ``tokenizer`` in it is relative to the folder that holds it, so a
    model folder copied elsewhere (the shipped zoo in any checkout) still finds its tokenizer (round 4, N71)."""
    path = Path(path)
    fields = json.loads(path.read_text())
    if isinstance(fields, dict) and isinstance(fields.get("tokenizer"), str) and not Path(fields["tokenizer"]).is_absolute():
        fields["tokenizer"] = str(path.parent / fields["tokenizer"])
    return TrainConfig.from_dict(fields)


def portable_train_config(cfg: TrainConfig, folder: str | Path) -> dict:
    """``cfg`` as ``folder/train_config.json`` is written for other machines: no absolute path of this one.  The
    tokenizer is named relative to ``folder`` when ``folder`` holds the same file (``tokenizer.json``), the run
    folder by its name."""
    fields, folder = cfg.to_dict(), Path(folder)
    own = folder / TOKENIZER_FILE
    if fields.get("tokenizer") and own.is_file() and Path(fields["tokenizer"]).is_file() \
            and own.read_bytes() == Path(fields["tokenizer"]).read_bytes():
        fields["tokenizer"] = TOKENIZER_FILE
    if Path(fields["out_dir"]).is_absolute():
        fields["out_dir"] = Path(fields["out_dir"]).name
    return fields


def read_resume_state(cfg: TrainConfig) -> tuple[dict, Path]:
    checkpoint = Path(cfg.out_dir) / CHECKPOINT_DIR
    clean_stale_temporaries(checkpoint)  # also puts back a checkpoint a crash left between two renames
    if not (checkpoint / STATE_FILE).is_file() or not (checkpoint / OPTIMIZER_FILE).is_file():
        raise CheckpointError(f"--resume: {checkpoint} holds no complete training checkpoint; start without --resume")
    try:
        saved = TrainConfig.from_dict(json.loads((checkpoint / CONFIG_FILE).read_text()))
        state = json.loads((checkpoint / STATE_FILE).read_text())
    except (ValueError, OSError) as err:
        raise CheckpointError(f"--resume: {checkpoint} is corrupt ({err})") from None
    try:  # the header and every tensor: a cut-short file fails here, not as a traceback mid-setup
        with safe_open(str(checkpoint / OPTIMIZER_FILE), framework="pt") as optimizer_file:
            for name in optimizer_file.keys():
                optimizer_file.get_slice(name)
    except (SafetensorError, OSError, ValueError) as err:
        raise CheckpointError(f"--resume: {checkpoint / OPTIMIZER_FILE} is corrupt ({str(err).splitlines()[0]}); "
                              "the run cannot continue exactly from it: start without --resume") from None
    problem = train_state_problem(state)
    if problem:
        raise CheckpointError(f"--resume: {checkpoint / STATE_FILE}: {problem}; the run cannot continue from it: start "
                              "without --resume")
    differing = sorted(k for k, v in saved.to_dict().items() if k not in RESUMABLE_DIFFERENCES and cfg.to_dict()[k] != v)
    if differing:
        raise CheckpointError(
            f"--resume: the checkpoint was trained with different {', '.join(differing)}; use the same settings (see {checkpoint / CONFIG_FILE})"
        )
    return state, checkpoint


MAX_STEP = 10**12  # a step count far beyond any run; a larger one is a damaged file


def train_state_problem(state) -> str | None:
    """What is wrong with a checkpoint's ``train_state.json`` (its keys, types and ranges), naming the key, or None
    (round 5, TR3 and TR6: a missing key was a traceback, a negative step named no file)."""
    if not isinstance(state, dict):
        return f"expected a table of step, tokens_seen and train_seconds, got {type(state).__name__}"
    for key in ("step", "tokens_seen"):
        value = state.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_STEP * 10**6:
            return f"{key} must be a whole number >= 0, got {value!r}"
    if state["step"] > MAX_STEP:
        return f"step must be at most {MAX_STEP}, got {state['step']}"
    seconds = state.get("train_seconds")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds < float("inf"):
        return f"train_seconds must be a number >= 0, got {seconds!r}"
    return None


def truncate_log(log_path: Path, step: int) -> None:
    """On resume, drop log lines written after the checkpoint so the log reads like one straight run."""
    if not log_path.exists():
        return
    lines = [line for line in log_path.read_text().splitlines() if line.strip()]
    kept = []
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
            logged_step = int(record["step"])
        except (ValueError, KeyError, TypeError) as err:
            if number == len(lines):  # the last line, cut short by a crash or a full disk: it is redone
                break
            raise CheckpointError(f"--resume: {log_path} line {number} is not a log record ({err}); "
                                  "remove that line and resume again") from None
        if logged_step <= step:
            kept.append(line)
    write_text_atomic(log_path, "".join(line + "\n" for line in kept))


# --- the loop -----------------------------------------------------------------------------------
@dataclass
class _Run:
    """What one process of a training run holds between steps (``_setup`` makes it)."""

    cfg: TrainConfig
    rank: int
    world_size: int
    device: torch.device
    out_dir: Path
    prepared: PreparedData  # train, validation, tokenizer
    model: torch.nn.Module
    ddp_model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    state: dict  # step, tokens_seen, train_seconds: where the run starts

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _setup(cfg: TrainConfig, resume: bool) -> _Run:
    """Distributed init, the output folder, the data, the model (new or resumed), optimizer and compile."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    rank, world_size, device = init_distributed(cfg)
    is_main = rank == 0
    out_dir = Path(cfg.out_dir)
    if is_main:
        if not resume and (out_dir / CHECKPOINT_DIR).exists():
            raise CheckpointError(f"{out_dir} already holds a checkpoint; pass --resume to continue it or choose another --out")
        out_dir.mkdir(parents=True, exist_ok=True)
    state: dict = dict(step=0, tokens_seen=0, train_seconds=0.0)
    own_tokenizer = None  # resuming: the data in the checkpoint's token ids, whoever prepared the cache
    if resume:
        state, checkpoint = read_resume_state(cfg)
        if (checkpoint / TOKENIZER_FILE).is_file():
            own_tokenizer = load_tokenizer(checkpoint / TOKENIZER_FILE)

    # Rank 0 builds the cached data first; the other ranks then load the same folder.
    if is_main:
        prepared = prepare_training_data(cfg, progress=cfg.progress, tokenizer=own_tokenizer)
    barrier(world_size)
    if not is_main:
        prepared = prepare_training_data(cfg, tokenizer=own_tokenizer)
    vocab_size = prepared.tokenizer.get_vocab_size()

    model = build_model(cfg.model_config(vocab_size)) if not resume else load_model(checkpoint)
    model = model.to(device).train()
    optimizer = make_optimizer(model, cfg)
    compiled, note = use_compile(cfg)
    if compiled:
        compile_for_training(model)
    elif note and is_main:
        print(note, file=sys.stderr)
    slow_bf16 = bf16_emulation_note(cfg, device)
    if slow_bf16 and is_main:
        print(slow_bf16, file=sys.stderr)
    if resume:
        load_optimizer_tensors(optimizer, load_file(str(checkpoint / OPTIMIZER_FILE)))
    # DSTG's final AP stream feeds no loss, so its last writers get no gradient: DDP must expect that.
    ddp_model = (
        torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=model.config.spec.ap_stream)
        if world_size > 1
        else model
    )
    if is_main:
        (out_dir / CONFIG_FILE).write_text(json.dumps(cfg.to_dict(), indent=2) + "\n")
        truncate_log(out_dir / LOG_FILE, state["step"])
    return _Run(cfg, rank, world_size, device, out_dir, prepared, model, ddp_model, optimizer, state)


def _next_batch(run: _Run, batches, step: int):
    """This rank's rows of the step's masked global batch (+ offsets and its real-token count)."""
    cfg, vocab_size = run.cfg, run.prepared.tokenizer.get_vocab_size()
    seed = step_seed(cfg.seed, step)
    ids, mask, labels = masked_batch(run.prepared.train, batches(step), cfg, vocab_size, generator_seed=seed)
    ids, mask, labels = pad_width_to_multiple(ids, mask, labels, cfg.padding_multiple(), cfg.max_length)
    max_positions = int(run.model.config.max_positions)  # type: ignore[union-attr, arg-type]
    offsets = random_offsets(mask, max_positions, seed + OFFSET_SEED_SHIFT) if cfg.random_offset else None
    n_tokens = int(mask.sum())  # all ranks, counted on the host before the step (no device sync)
    ids, mask, labels, offsets, loss_scale = rank_share(ids, mask, labels, offsets, run.rank, run.world_size)
    # A batch without padding needs no mask: SDPA can then take its fused kernels.
    mask = None if bool(mask.all()) else mask
    if run.device.type == "cuda":  # page-locked here, in the prefetch thread: the step's copies are then async
        ids, labels = ids.pin_memory(), labels.pin_memory()
        mask = mask.pin_memory() if mask is not None else None
        offsets = offsets.pin_memory() if offsets is not None else None
    return ids, mask, labels, offsets, loss_scale, n_tokens


def _train_step(run: _Run, batch, step: int):
    """One optimizer step on ``batch``; returns (loss, gradient norm) as tensors (the loss unscaled)."""
    cfg, device = run.cfg, run.device
    ids, mask, labels, offsets, loss_scale, _ = batch
    ids, labels = ids.to(device, non_blocking=True), labels.to(device, non_blocking=True)
    mask = mask.to(device, non_blocking=True) if mask is not None else None
    offsets = offsets.to(device, non_blocking=True) if offsets is not None else None
    for group in run.optimizer.param_groups:
        group["lr"] = learning_rate(cfg, step)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.bf16):
        loss = run.ddp_model(ids, mask, labels, masked_logits_only=True, masked_rows_multiple=cfg.padding_multiple(),
                             position_offset=offsets).loss
    run.optimizer.zero_grad(set_to_none=True)
    (loss if loss_scale is None else loss * loss_scale).backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(run.model.parameters(), cfg.grad_clip)
    run.optimizer.step()
    return loss, grad_norm


def _write_log(log, record: dict) -> None:
    log.write(json.dumps(record) + "\n")
    log.flush()


def _evaluate_and_save(run: _Run, log, step: int, last_step: int, tokens_seen: int, elapsed: float,
                       metrics: dict, on_eval=None) -> dict:
    """Validation every ``eval_every`` steps and at the end (and ``on_eval`` then, on the main rank), a
    checkpoint every ``save_every`` steps and at the last; returns the latest validation metrics."""
    cfg = run.cfg
    if step % cfg.eval_every == 0 or step == cfg.max_steps:
        if run.is_main:
            metrics = evaluate(run.model, run.prepared.validation, cfg, run.device)
            _write_log(log, dict(step=step, **{k: round(v, 5) for k, v in metrics.items()}))
            if on_eval is not None:
                on_eval(run.model, step, tokens_seen)
        barrier(run.world_size)
    if step % cfg.save_every == 0 or step == last_step:
        if run.is_main:
            save_training_checkpoint(run.model, run.optimizer, run.prepared.tokenizer, cfg, step, tokens_seen, elapsed)
        barrier(run.world_size)
    return metrics


def train(cfg: TrainConfig, resume: bool = False, stop_after_step: int | None = None, on_eval=None) -> dict:
    """Run (or continue) pretraining; returns the final validation metrics and throughput.

    ``stop_after_step`` ends the run early after that step's checkpoint and validation (used to test
    resuming, and by the recipe study to train part of a longer schedule).  ``on_eval(model, step,
    tokens_seen)`` is called on the main rank after each validation (the model is in train mode again), e.g. to
    read the position table's spectrum as training goes (``experiments/recipe_study.py``).
    """
    run = _setup(cfg, resume)
    log = open(run.out_dir / LOG_FILE, "a") if run.is_main else None
    step, tokens_seen, elapsed = run.state["step"], run.state["tokens_seen"], run.state["train_seconds"]
    last_step = cfg.max_steps if stop_after_step is None else min(cfg.max_steps, stop_after_step)
    bar = tqdm(total=cfg.max_steps, initial=step, desc=f"train {cfg.model['variant']}",
               disable=not (run.is_main and cfg.progress), dynamic_ncols=True)
    window_start, window_tokens = time.perf_counter(), 0
    metrics: dict = {}
    batches = batch_order(run.prepared.train, cfg)
    # Collation and masking of step s+1 run in a thread while step s computes (torch releases the GIL).
    prefetch = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    upcoming = prefetch.submit(_next_batch, run, batches, step) if step < last_step else None
    try:
        while step < last_step:
            step_start = time.perf_counter()
            batch = upcoming.result()
            upcoming = prefetch.submit(_next_batch, run, batches, step + 1) if step + 1 < last_step else None
            loss, grad_norm = _train_step(run, batch, step)
            step += 1
            tokens_seen, window_tokens = tokens_seen + batch[-1], window_tokens + batch[-1]
            elapsed += time.perf_counter() - step_start
            if run.is_main and (step % cfg.log_every == 0 or step == last_step):
                now = time.perf_counter()
                tokens_per_s = window_tokens / max(now - window_start, 1e-9)
                window_start, window_tokens = now, 0
                # the only device reads of a step, and only on log steps: one transfer for both values
                loss_value, norm_value = torch.stack([loss.detach().float(), grad_norm.float()]).tolist()
                _write_log(log, dict(step=step, loss=round(loss_value, 5), lr=learning_rate(cfg, step - 1),
                                     grad_norm=round(norm_value, 4), tokens_seen=tokens_seen,
                                     tokens_per_s=round(tokens_per_s, 1), train_seconds=round(elapsed, 2)))
                bar.set_postfix(loss=f"{loss_value:.3f}", tok_s=f"{tokens_per_s:.0f}")
            bar.update(1)
            pause_start = time.perf_counter()
            metrics = _evaluate_and_save(run, log, step, last_step, tokens_seen, elapsed, metrics, on_eval)
            window_start += time.perf_counter() - pause_start  # tokens/s counts training steps, not validation or saving
    finally:  # Ctrl-C: main() reports it in one line, naming the last complete checkpoint
        prefetch.shutdown(wait=True, cancel_futures=True)
        bar.close()
        if log is not None:
            log.close()
    return dict(step=step, tokens_seen=tokens_seen, train_seconds=elapsed, **metrics)
