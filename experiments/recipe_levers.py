"""The recipe levers and named arms of the recipe study (``experiments/recipe_study.py``): what each lever
changes in a training run, and the arm specs (``[variant:]arm[,lever=value...]``) that combine them.

    from experiments.recipe_levers import parse_arm, recipe_for
    arm = parse_arm("ap:reimpl,tie=false")        # the minimal re-implementation's recipe with an untied head
    recipe = recipe_for(arm, "ap")                 # the zoo recipe with the arm's levers applied

A recipe is a dict of lever values; ``train_config`` turns one into a ``TrainConfig``.  Levers that exist in
one variant only (``mlp``, ``rp``, ``d_ap``: DSTG; ``pos_init``: the two with a learned table) are left out
of the variants they do not apply to (``nope``, no positional input at all, takes none of them: only the
levers of training and of the one-stream block apply to it) when a named arm sets them for all (``reimpl`` for AP-NeoBERT is the
re-implementation's recipe without DSTG's FFN and RP choices), and refused when an arm names them for
such a variant explicitly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dstg_interp.data.forms import split_form_spec
from dstg_interp.variants import VARIANTS, variant_row

MAX_WINDOW = 8192  # tokens per training sequence: far above the paper's 512; a larger number is a typo
# lever -> (parser of a command-line value, the variants it applies to: those whose row of the variants table has
# this field true, None = all; what it changes)
LEVER_SPECS: dict[str, tuple[Any, Any, str]] = {
    "lr": (float, None, "peak learning rate"),
    "warmup": (int, None, "warm-up steps"),
    "schedule": (str, None, "cosine, linear, or constant with a linear decay over the last 20% of the steps"),
    "batch": (int, None, "sequences per step (the study keeps the training tokens fixed)"),
    "tie": ("bool", None, "MLM head tied to the token embedding"),
    "pos_init": (float, "position_table", "std of the learned position table's init (none = every weight's 0.02)"),
    "vocab": (int, None, "WordPiece vocabulary size, trained on the training split"),
    "d_ap": (int, "ap_stream", "DSTG's AP width (d_sem = 128 - d_ap)"),
    "windows": ("bool", None, "true: sentence-boundary windows over whole documents; false: one sequence per "
                              "document, from its start, truncated"),
    "mlp": (str, "ap_stream", "DSTG FFN: split (hidden units per stream) or mixed (one SwiGLU writing both)"),
    "rp": ("bool", "ap_stream", "DSTG's learned relative-position bias on (true) or absent (false)"),
    "rp_prior": (float, "relative_bias", "the relative bias started at a locality prior of this strength, "
                                        "-s * ln(1 + |offset|) (ModelConfig.rp_locality_init; none = zero, the authors')"),
    "tokens": (int, None, "this arm's training tokens (default: the study's --tokens), e.g. the minimal "
                          "re-implementation's own 8M, for the schedule horizon"),
    "horizon": (int, None, "training tokens the learning-rate schedule is planned over (default: the run's own "
                           "tokens); a run with horizon > tokens stops part-way through its schedule, so the "
                           "budget at a high learning rate is a lever of its own"),
    "wd": (float, None, "AdamW weight decay on matrices and embeddings (the position table included)"),
    "normed": ("bool", "ap_stream", "the authors' normed residual, x <- norm(x) + f(norm(x)) (ModelConfig."
                                  "residual_from_normed), instead of plain pre-norm"),
    "layers": (int, None, "encoder blocks (default: the study's --n-layers)"),
    "window": (int, None, "tokens per training sequence and rows of the position table (default: the study's "
                          "--max-length; the paper's 512)"),
    "beta2": (float, None, "AdamW's second-moment decay (the zoo's 0.98; NeoBERT's configs 0.95)"),
    "corpus": (str, None, "training corpus spec (default: the study's --corpus), e.g. en-mix:wikipedia, the "
                          "Wikipedia leads the minimal re-implementation trained on, or a document form of one, "
                          "en-large:-wikipedia@words=80 (dstg_interp/data/forms.py); plateau exit and held-out "
                          "gain are then read on that corpus's own validation and held-out documents"),
}
LEVER_CHOICES = {"schedule": ("cosine", "linear", "constant"), "mlp": ("split", "mixed")}

# The former zoo recipe (the one-lever screen's base) and the shipped zoo's recipe (the diagnosis's base).
FORMER_RECIPE = dict(lr=1e-3, warmup=None, schedule="cosine", batch=32, tie=False, pos_init=None, vocab=8192, d_ap=16,
                     windows=True, mlp="split", rp=True, corpus=None, tokens=None, horizon=None, wd=0.1, normed=False,
                     layers=None, beta2=0.98)
ZOO_RECIPE = dict(FORMER_RECIPE, warmup=200, schedule="constant", batch=16)
# Named arms of the diagnosis, as lever values over ZOO_RECIPE.  ``reimpl``: the minimal re-implementation
# of shared/notes/ap-feasibility.md (batch 32, cosine after 200 warm-up steps, tied head, one sequence per
# document from its start, vocabulary 4096; its disentangled model: one mixed SwiGLU, no relative bias).
ARMS: dict[str, dict[str, Any]] = {
    "zoo": {},
    "reimpl": dict(batch=32, schedule="cosine", tie=True, windows=False, vocab=4096, mlp="mixed", rp=False),
    # the lever study's base (issue 35): reimpl on the Wikipedia leads with the 8M-token cosine it was planned
    # over, the run that collapses the table to PC1+PC2 0.86 by 4.1M tokens (shared/notes/science-turn4.md, run 2)
    "reimpl-wiki": dict(batch=32, schedule="cosine", tie=True, windows=False, vocab=4096, mlp="mixed", rp=False,
                        corpus="en-mix:wikipedia", horizon=8_000_000),
    # the authors' public code as far as it is known (figures/recipe/AUTHORS_RECIPE.md; the 6-layer zoo's
    # recipe is experiments/pretrain_zoo.RECIPES["authors"]): one document per sequence from its start, cosine
    # after warm-up, untied head, their block-masked FFN (split), RP bias, the normed residual, AdamW betas
    # (0.9, 0.95) and weight decay 0.01 (NeoBERT's configs); baselines take every choice that applies to them
    "authors": dict(batch=32, schedule="cosine", tie=False, windows=False, mlp="split", rp=True, normed=True, wd=0.01,
                    beta2=0.95),
    "mixed": dict(mlp="mixed"),
    "no-rp": dict(rp=False),
    "tied": dict(tie=True),
    "doc-start": dict(windows=False),
    "vocab-4096": dict(vocab=4096),
    "batch-32": dict(batch=32),
    "cosine": dict(schedule="cosine"),
}
# the one-lever screen (no --arms): the values tried per lever, over FORMER_RECIPE
SCREEN_VALUES: dict[str, list[Any]] = {"lr": [3e-3], "batch": [16], "pos_init": [0.2], "tie": [True], "schedule": ["constant"], "warmup": [10],
                 "d_ap": [32], "vocab": [4096]}


@dataclass(frozen=True)
class Arm:
    """One arm: its label (the spec without the variant), the variant it is pinned to (None = every
    variant of the study) and its lever values over the base recipe."""

    label: str
    variant: str | None
    levers: tuple  # ((lever, value), ...) in the order given
    explicit: frozenset  # levers named in the spec itself (refused where they do not apply)


def parse_value(lever: str, text: str):
    kind = LEVER_SPECS[lever][0]
    if kind == "bool":
        if text.lower() not in ("true", "false"):
            raise ValueError(f"lever {lever}: expected true or false, got {text!r}")
        return text.lower() == "true"
    try:
        value = kind(text)
    except ValueError:
        raise ValueError(f"lever {lever}: expected a {kind.__name__}, got {text!r}") from None
    if lever in LEVER_CHOICES and value not in LEVER_CHOICES[lever]:
        raise ValueError(f"lever {lever}: expected one of {', '.join(LEVER_CHOICES[lever])}, got {text!r}")
    if lever == "corpus":
        split_form_spec(value)  # a bad document form (words=0) fails here, before any data is read
    if kind in (int, float) and not value > 0:
        raise ValueError(f"lever {lever}: must be positive, got {text}")
    if lever == "window" and not 3 <= value <= MAX_WINDOW:
        raise ValueError(f"lever window: a training sequence holds 3 to {MAX_WINDOW} tokens, got {value}")
    return value


def parse_arm(spec: str) -> Arm:
    """``[variant:]name[,lever=value...]`` or ``[variant:]lever=value[,...]`` (over the zoo recipe)."""
    head, colon, rest = spec.partition(":")  # a lever value may hold a colon too (corpus=en-mix:wikipedia)
    variant, body = (head, rest) if colon and "=" not in head and "," not in head else ("", spec)
    if variant and variant not in VARIANTS:
        raise ValueError(f"arm {spec!r}: unknown variant {variant!r}; choose from {', '.join(VARIANTS)}")
    parts = [part.strip() for part in body.split(",")]
    if not body or any(not part for part in parts):
        raise ValueError(f"arm {spec!r}: expected [variant:]arm[,lever=value...]")
    levers: dict = {}
    if "=" not in parts[0]:
        if parts[0] not in ARMS:
            raise ValueError(f"unknown arm {parts[0]!r} in {spec!r}; choose from {', '.join(ARMS)} or give lever=value")
        levers.update(ARMS[parts[0]])
        parts = parts[1:]
    explicit = set()
    for part in parts:
        lever, _, text = part.partition("=")
        if lever not in LEVER_SPECS:
            raise ValueError(f"unknown lever {lever!r} in arm {spec!r}; choose from {', '.join(LEVER_SPECS)}")
        if not text:
            raise ValueError(f"lever {lever}: expected {lever}=value in arm {spec!r}")
        levers[lever] = parse_value(lever, text)
        explicit.add(lever)
    arm = Arm(body, variant or None, tuple(levers.items()), frozenset(explicit))
    if arm.variant:
        refused = [lever for lever in explicit | set(ARMS.get(body.split(",")[0], {})) if not applies(lever, arm.variant)]
        named = [lever for lever in refused if lever in explicit]
        if named:
            raise ValueError(f"arm {spec!r}: lever {named[0]} does not apply to variant {arm.variant!r}")
        if not [lever for lever in dict(arm.levers) if applies(lever, arm.variant)] and arm.levers:
            raise ValueError(f"arm {spec!r}: none of its levers applies to variant {arm.variant!r}")
    return arm


def applies(lever: str, variant: str) -> bool:
    needs = LEVER_SPECS[lever][1]
    return needs is None or getattr(variant_row(variant), needs)


def recipe_for(arm: Arm, variant: str, base: dict = ZOO_RECIPE) -> dict | None:
    """The base recipe with the arm's levers that apply to ``variant``; None when the arm changes nothing
    for it (a DSTG-only arm and a baseline) or names a lever that does not apply."""
    levers = dict(arm.levers)
    if any(not applies(lever, variant) for lever in arm.explicit):
        return None
    kept = {lever: value for lever, value in levers.items() if applies(lever, variant)}
    if levers and not kept:
        return None
    return dict(base, **kept)
