"""``dstg-figures NAME [flags]``: every experiment script as one command, so a ``pip install`` draws the paper's
figures without a clone (the scripts ship in the wheel as the ``experiments`` package, and
``python -m experiments.fig_probes`` works there too).

    dstg-figures --list                            # the figures (without a NAME: the same, exit code 2)
    dstg-figures probes --model runs/mine path/to/all-MiniLM-L6-v2 --name mine MiniLM --out my-figures/probes
    dstg-figures heads --help                      # a figure's flags: its script's config, as with python -m

NAME is a figure of ``FIGURES`` (or its module's name, ``fig_probes``); the flags after it are the script's own.
Bad input is one ``dstg-figures NAME: error: ...`` line and exit code 2, Ctrl-C 130, as every dstg-* command.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass

from dstg_interp.cli.entry import ImportNotice
from dstg_interp.cli.help_text import print_stored_help
from dstg_interp.cli.shell import EXIT_ERROR, EXIT_INTERRUPTED, run_cli

@dataclass(frozen=True)
class Figure:
    """One row of the figure registry: every consumer (``dstg-figures``, its stored help texts, ``run_all``'s
    gallery, the every-figure ``--out`` test) reads the figures from ``FIGURES`` and nowhere else."""

    module: str  # the script: python -m MODULE, or dstg-figures NAME
    what: str  # what it draws, one line of dstg-figures --list
    gallery: str | None = None  # its folder in the gallery run_all draws (None: not in the gallery)


# name -> row, in the order dstg-figures lists them and run_all draws the gallery's
FIGURES = {
    "ap-manifold": Figure("experiments.fig_ap_manifold", "PCA and DCT of learned position tables and of layer states",
                          "ap_manifold"),
    "heads": Figure("experiments.fig_heads", "attention heads classified structure / semantic / RP / mixed", "heads"),
    "probes": Figure("experiments.fig_probes", "linear position probes by layer and subspace", "probes"),
    "holmes-suite": Figure("experiments.holmes_suite", "the offline Holmes suite probed, tabled and drawn", "holmes"),
    "holmes": Figure("experiments.fig_holmes", "the Holmes figures of a results folder", "holmes_figure"),
    "erasure": Figure("experiments.fig_erasure", "loss and output change when position is erased at a layer"),
    "interventions": Figure("experiments.fig_interventions", "AP-stream interventions: MLM and attention change"),
    "extrapolation": Figure("experiments.fig_extrapolation", "length extrapolation along the AP manifold",
                            "extrapolation"),
    "invariance": Figure("experiments.fig_invariance", "position-free semantic states and retrieval", "invariance"),
    "patching": Figure("experiments.fig_patching", "activation and attribution patching per layer, position and stream"),
    "logit-lens": Figure("experiments.fig_logit_lens", "each layer decoded through the model's own MLM head"),
    "rope-bands": Figure("experiments.fig_rope_bands", "RoPE heads classified by the frequency bands of their q.k"),
    "ground-truth": Figure("experiments.fig_ground_truth",
                           "each method's position subspace scored against DSTG's AP stream"),
    "place-cells": Figure("experiments.fig_place_cells", "SAE latents as place cells: receptive fields over position"),
    "decomposition": Figure("experiments.fig_decomposition",
                            "hidden states split into mean, position, context, residual"),
    "geometry": Figure("experiments.fig_geometry", "one table of any encoder's position geometry, beside smooth controls"),
    "attention-view": Figure("experiments.fig_attention_view",
                             "one text's attention by head and logit term, as an HTML page"),
    "gallery": Figure("experiments.run_all", "the whole gallery of the shipped zoo (run_all)"),
}
PROG = "dstg-figures"


def listing() -> str:
    width = max(map(len, FIGURES))
    lines = [f"usage: {PROG} NAME [flags]   ({PROG} NAME --help: the figure's flags)", "", "figures:"]
    lines += [f"  {name:<{width}}  {row.what} ({row.module})" for name, row in FIGURES.items()]
    return "\n".join(lines)


def module_of(name: str) -> str | None:
    """The module of figure ``name`` (``probes``, ``ap_manifold``, ``fig_probes`` all name one), or None."""
    key = name.replace("_", "-")
    key = key[4:] if key.startswith("fig-") else key
    if key in FIGURES:
        return FIGURES[key].module
    return next((row.module for row in FIGURES.values() if row.module.rsplit(".", 1)[1] == name), None)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "--list"):
        print(listing())
        return 0 if argv else EXIT_ERROR
    name, flags = argv[0], argv[1:]
    if name in FIGURES and print_stored_help(PROG, argv):  # dstg-figures heads --help: no torch (cli/help_text.py)
        return 0
    module_name = module_of(name)
    if module_name is None:
        print(f"{PROG}: error: no figure named {name!r}; choose one of {', '.join(FIGURES)} ({PROG} lists them)",
              file=sys.stderr)
        return EXIT_ERROR
    prog = f"{PROG} {name}"
    slow_start = ImportNotice(prog)  # on a terminal, a line while the imports take more than a few seconds
    try:
        module = importlib.import_module(module_name)  # torch & co. load here, after Ctrl-C is ours
    except KeyboardInterrupt:
        slow_start.stop()
        print(f"{PROG}: interrupted (Ctrl-C) while starting; nothing was written", file=sys.stderr)
        return EXIT_INTERRUPTED
    slow_start.stop()
    program, sys.argv[0] = sys.argv[0], prog  # argparse's usage line names the figure
    try:
        return run_cli(prog, lambda: module.main(flags) and 0)  # as each script's own run_as_command
    finally:
        sys.argv[0] = program


if __name__ == "__main__":
    sys.exit(main())
