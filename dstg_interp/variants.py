"""The model variants, named once: one row per variant (``VARIANTS``, data), read wherever a variant is asked about.

    variant_row("rp").relative_bias       # True: a learned relative bias in attention
    variant_row("dstg").display_name      # "DSTG-NeoBERT"
    variant_row("alibi")                  # ValueError: unknown variant 'alibi'; known: dstg, rope, ap, rp, nope

The config validates against it, ``build_model`` picks the model class from it, the hook table its family, the
zoo and the tiny zoo their widths, the figures their names and colours; a question about a variant ("has it an
AP stream?", "a learned position table?") is a read of a field, never a comparison with a name. A new variant
is one row here (and, for a new architecture, its model class in ``model/``).

Floor 1: imports nothing of ours, so the config below every room can read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Variant:
    """One model variant: how it is built, where position enters it, its zoo sizes and how figures show it."""

    name: str
    model_class: Literal["DSTGNeoBERT", "NeoBERT"]  # the class build_model makes (model/checkpoint.py MODEL_CLASSES)
    hook_family: Literal["dstg", "neobert"]  # its entry of encoders/hooks.py HOOK_TABLE
    # where position enters: DSTG's separate AP stream (d_ap beside d_sem: subspaces ap / sem / full), a learned
    # absolute position table (DSTG's AP stream, AP-NeoBERT's embedding), a learned relative bias, rotary q/k
    ap_stream: bool
    position_table: bool
    relative_bias: bool
    rotary: bool
    mechanism: str  # how position enters, in words (the refusals of analyses that need one say it)
    role: Literal["proposed", "baseline", "floor"]  # in the zoo: the paper's model, its baselines, the NoPE floor
    zoo_widths: dict  # the ModelConfig widths of the shipped zoo (d_model 128) and of the tiny zoo (32)
    tiny_widths: dict
    display_name: str  # what a figure calls it
    short_name: str  # what a report table calls it
    color: str  # its colour in every figure (Okabe-Ito)

    @property
    def has_position_input(self) -> bool:
        """False for the NoPE floor: nothing in the model tells positions apart."""
        return self.position_table or self.relative_bias or self.rotary

    def widths(self, tiny: bool = False) -> dict:
        """The ModelConfig fields of a zoo (``tiny``: tiny zoo) model of this variant but its depth (a copy)."""
        return dict(variant=self.name, **(self.tiny_widths if tiny else self.zoo_widths))


def _one_stream(name: str, *, mechanism: str, display_name: str, short_name: str, color: str,
                position_table: bool = False, relative_bias: bool = False, rotary: bool = False,
                role: Literal["baseline", "floor"] = "baseline") -> Variant:
    """A row of the one-stream NeoBERT block: the class, hook family and widths the baselines share."""
    return Variant(name, model_class="NeoBERT", hook_family="neobert", ap_stream=False, position_table=position_table,
                   relative_bias=relative_bias, rotary=rotary, mechanism=mechanism, role=role,
                   zoo_widths=dict(d_model=128), tiny_widths=dict(d_model=32), display_name=display_name,
                   short_name=short_name, color=color)


# One row per variant; table order is the canonical order (figures draw and tables list the variants in it).
VARIANTS: dict[str, Variant] = {row.name: row for row in (
    Variant("dstg", model_class="DSTGNeoBERT", hook_family="dstg",
            ap_stream=True, position_table=True, relative_bias=True, rotary=False,
            mechanism="its AP stream (a learned table) and a learned relative bias", role="proposed",
            # 112 + 16 (1:7, so each head keeps 4 AP value dims); the tiny zoo 24 + 8
            zoo_widths=dict(d_sem=112, d_ap=16), tiny_widths=dict(d_sem=24, d_ap=8),
            display_name="DSTG-NeoBERT", short_name="DSTG", color="#0072B2"),
    _one_stream("rope", rotary=True, mechanism="rotary q/k",
                display_name="RoPE-NeoBERT", short_name="RoPE", color="#E69F00"),
    _one_stream("ap", position_table=True, mechanism="a learned table added to the token embedding",
                display_name="AP-NeoBERT", short_name="AP-NeoBERT", color="#009E73"),
    _one_stream("rp", relative_bias=True, mechanism="a learned relative bias in attention",
                display_name="RP-NeoBERT", short_name="RP", color="#CC79A7"),
    _one_stream("nope", role="floor",  # no positional input: the grey floor
                mechanism="nowhere: it has no positional input at all (NoPE-NeoBERT, the floor of the position readings)",
                display_name="NoPE-NeoBERT", short_name="NoPE (floor)", color="#888888"),
)}


def variant_row(name: str) -> Variant:
    """The row of variant ``name``, or one clear ValueError naming the known variants."""
    row = VARIANTS.get(name) if isinstance(name, str) else None
    if row is None:
        raise ValueError(f"unknown variant {name!r}; known: {', '.join(VARIANTS)}")
    return row


def variants_where(**fields) -> tuple[str, ...]:
    """The variants whose fields equal ``fields``, in table order: ``variants_where(role="baseline")``."""
    return tuple(name for name, row in VARIANTS.items() if all(getattr(row, k) == v for k, v in fields.items()))


def position_mechanism(variant: str) -> str:
    """How position enters a model of ``variant`` (one phrase for messages; another model: "another way")."""
    row = VARIANTS.get(variant)
    return row.mechanism if row is not None else "another way"
