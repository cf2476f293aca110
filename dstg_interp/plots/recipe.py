"""Learning curves of the recipe study and of the zoo: validation MLM loss against training tokens."""

from __future__ import annotations

from typing import Literal

import matplotlib.pyplot as plt
from matplotlib.artist import Artist
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
import numpy as np
import pandas as pd
import seaborn as sns

from .output import display_name, ordered_models, require_columns, save_figure, shared_legend


def distinct_colors(names: list) -> dict:
    """One colour per name, none repeated: tab10 up to ten names, tab20 up to twenty, evenly spaced hues beyond
    (a study with eleven arms once lost its figure to tab10's ten colours)."""
    palette = "tab10" if len(names) <= 10 else "tab20" if len(names) <= 20 else "husl"
    return dict(zip(names, sns.color_palette(palette, len(names))))


def plot_recipe_curves(curves: pd.DataFrame, out_dir, stem: str = "recipe_curves") -> dict:
    """One panel per variant, one line per run (``run`` column; the ``base`` run drawn thick and black).

    ``curves``: tidy rows with variant, run, tokens, val_loss (``experiments/recipe_study.py``'s curves.csv).
    With a ``unigram_loss`` column the y axis is val_loss - unigram_loss on the same masked tokens (0 = the
    unigram plateau), the comparable number when a lever changes the vocabulary or the validation batches.
    """
    require_columns(curves, ["variant", "run", "tokens", "val_loss"], "recipe curves")
    relative = "unigram_loss" in curves
    curves = curves.assign(y=curves.val_loss - curves.unigram_loss if relative else curves.val_loss)
    variants = ordered_models(curves.variant.unique())
    runs = [r for r in dict.fromkeys(curves.run) if r != "base"]
    colors = distinct_colors(runs)
    fig, axes = plt.subplots(1, len(variants), figsize=(4.2 * len(variants), 3.6), sharey=True, squeeze=False)
    for ax, variant in zip(axes[0], variants):
        for run, curve in curves[curves.variant == variant].groupby("run", sort=False):
            curve = curve.sort_values("tokens")
            style = dict(color="black", linewidth=2.4, zorder=3) if run == "base" else dict(color=colors[run], linewidth=1.3)
            ax.plot(curve.tokens / 1e6, curve.y, label=run, **style)
        if relative:
            ax.axhline(0.0, color="grey", linewidth=0.8)
        ax.set_title(variant)
        ax.set_xlabel("training tokens (millions)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("validation loss - unigram loss" if relative else "validation MLM loss")
    shared_legend(fig, axes[0], max_columns=5)
    return save_figure(fig, out_dir, stem, curves.drop(columns="y").to_dict(orient="records"))


DIAGNOSIS_READINGS = (("heldout_gain_points", "held-out gain over\nmost-frequent token (points)", None),
                      ("pc1_pc2_matched", "position table PC1+PC2\n(on random 16-dim subspaces)", "pc1_pc2_matched_chance"),
                      ("position_r2_last", "token-position R$^2$,\nposition stream, last block", None))


def plot_diagnosis(curves: pd.DataFrame, runs: pd.DataFrame, out_dir, stem: str = "diagnosis") -> dict:
    """The recipe diagnosis: top, validation loss minus the unigram loss on the same masked tokens against
    training tokens, one panel per variant, one colour per arm (a line per seed); bottom, per (variant, arm),
    the held-out gain over the most-frequent token, the position table's PC1+PC2 on random 16-dim subspaces
    of its columns (comparable across widths; a grey tick: the same for Gaussian tables, i.e. chance) and
    the last block's token-position R^2 (bars: mean over seeds; dots: seeds).

    ``curves``: variant, arm, seed, tokens, val_loss, unigram_loss (``diagnosis_curves.csv``); ``runs``: one row
    per run with the columns of ``DIAGNOSIS_READINGS`` (``diagnosis_runs.csv``).
    """
    require_columns(curves, ["variant", "arm", "seed", "tokens", "val_loss", "unigram_loss"], "diagnosis curves")
    require_columns(runs, ["variant", "arm", "seed"], "diagnosis runs")
    variants = ordered_models(curves.variant.unique())
    arms = list(dict.fromkeys(curves.arm))
    colors = distinct_colors(arms)
    n_columns = max(len(variants), len(DIAGNOSIS_READINGS))
    fig, axes = plt.subplots(2, n_columns, figsize=(4.0 * n_columns, 8.0), squeeze=False,
                             gridspec_kw={"hspace": 0.45})
    for ax, variant in zip(axes[0], variants):
        for (arm, seed), curve in curves[curves.variant == variant].groupby(["arm", "seed"], sort=False):
            curve = curve.sort_values("tokens")
            ax.plot(curve.tokens / 1e6, curve.val_loss - curve.unigram_loss, color=colors[arm], linewidth=1.3,
                    label=arm, linestyle=("-", "--", ":", "-.")[int(seed) % 4])
        ax.axhline(0.0, color="grey", linewidth=0.8)
        ax.axhline(-0.5, color="grey", linewidth=0.8, linestyle=":")
        ax.set_title(f"{variant}: validation loss - unigram")
        ax.set_xlabel("training tokens (millions)")
        ax.grid(alpha=0.3)
    for ax in axes[0][len(variants):]:
        ax.axis("off")
    # one lever a line, so long arm specs stay readable under a bar (the ticks are turned for the same reason)
    labels = [f"{variant}: " + arm.replace(",", "\n").replace(" (", "\n(") for variant, arm in dict.fromkeys(zip(runs.variant, runs.arm))]
    keys = list(dict.fromkeys(zip(runs.variant, runs.arm)))
    for ax, (column, title, chance) in zip(axes[1], DIAGNOSIS_READINGS):
        for x, key in enumerate(keys):
            group = runs[(runs.variant == key[0]) & (runs.arm == key[1])]
            values = group[column].dropna() if column in group else pd.Series(dtype=float)
            if len(values):
                ax.bar(x, values.mean(), color=colors.get(key[1], "grey"), alpha=0.55)
                ax.scatter(np.full(len(values), x), values, color="black", s=12, zorder=3)
            if chance and chance in group and group[chance].notna().any():
                ax.plot([x - 0.4, x + 0.4], [group[chance].mean()] * 2, color="grey", linewidth=2)
        ax.set_xticks(range(len(keys)), labels, fontsize=6.5, rotation=60, ha="right", rotation_mode="anchor")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    for ax in axes[1][len(DIAGNOSIS_READINGS):]:
        ax.axis("off")
    shared_legend(fig, axes[0][: len(variants)], max_columns=5, anchor=1.03)
    numbers = dict(curves=curves.to_dict(orient="records"), runs=runs.to_dict(orient="records"),
                   bands={"dotted line": "0.5 nats below the unigram loss: the plateau exit",
                          "grey tick": "width-matched PC1+PC2 of Gaussian tables (chance)",
                          "line style": "seed (solid 0, dashed 1, dotted 2)"})
    return save_figure(fig, out_dir, stem, numbers)


LineStyle = Literal["-", "--", "-.", ":"]


def recipe_styles(recipes: list[str]) -> dict[str, LineStyle]:
    """Line style per recipe, in the order given (earliest first): the last recipe -- the zoo a figure is about --
    solid, the earlier ones dashed, dash-dotted, then dotted (so a figure of one zoo beside two earlier ones draws
    it solid, as one beside one earlier zoo does)."""
    earlier: list[LineStyle] = ["--", "-.", ":"]
    if len(recipes) > len(earlier) + 1:
        raise ValueError(f"at most {len(earlier) + 1} recipes can be told apart by line style, got {len(recipes)}")
    return {**dict(zip(recipes[:-1], earlier)), **({recipes[-1]: "-"} if recipes else {})}


def plot_zoo_curves(curves: pd.DataFrame, out_dir, stem: str = "zoo_curves", exits: pd.DataFrame | None = None,
                    margin: float | None = None) -> dict:
    """Validation loss against tokens for every variant, one line per (recipe, seed): line style = recipe
    (``recipe_styles``: the last, the zoo drawn, solid; earlier ones dashed, dash-dotted, dotted), colour =
    training seed, so the plateau each variant leaves (or not) is visible side by side.  A grey line is a
    recipe's unigram loss on its own validation masks (same style); with ``exits`` (variant, recipe, seed,
    exit_tokens: ``experiments.zoo_curves.plateau_exits``) a dot marks where each run first falls ``margin``
    nats below it.

    ``curves``: tidy rows with variant, recipe, seed, tokens, val_loss.
    """
    require_columns(curves, ["variant", "recipe", "seed", "tokens", "val_loss"], "zoo curves")
    variants = ordered_models(curves.variant.unique())
    recipes = list(dict.fromkeys(curves.recipe))
    styles = recipe_styles(recipes)
    colors = plt.get_cmap("tab10").colors  # type: ignore[attr-defined]  # a ListedColormap
    fig, axes = plt.subplots(1, len(variants), figsize=(4.2 * len(variants), 3.8), sharey=True, squeeze=False)
    for ax, variant in zip(axes[0], variants):
        for (recipe, seed), curve in curves[curves.variant == variant].groupby(["recipe", "seed"], sort=False):
            curve = curve.sort_values("tokens")
            ax.plot(curve.tokens / 1e6, curve.val_loss, linestyle=styles[recipe], color=colors[int(seed) % 10])
        for recipe in recipes if "unigram_loss" in curves else ():  # each recipe's validation batches have their own
            unigram = curves[(curves.variant == variant) & (curves.recipe == recipe)].unigram_loss.dropna()
            if len(unigram):
                ax.axhline(float(unigram.iloc[0]), color="grey", linewidth=0.8, linestyle=styles[recipe])
        if exits is not None:
            for e in exits[(exits.variant == variant) & exits.exit_tokens.notna()].to_dict("records"):
                level = curves[(curves.variant == variant) & (curves.recipe == e["recipe"]) & (curves.seed == e["seed"])
                               & (curves.tokens == e["exit_tokens"])].val_loss
                if len(level):
                    ax.plot(e["exit_tokens"] / 1e6, float(level.iloc[0]), "o", color=colors[int(e["seed"]) % 10], markersize=4)
        ax.set_title(display_name(variant))
        ax.set_xlabel("training tokens (millions)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("validation MLM loss")
    handles = [Line2D([], [], color="black", linestyle=styles[r], label=r) for r in recipes]
    handles += [Line2D([], [], color=colors[int(s) % 10], label=f"seed {s}") for s in sorted(curves.seed.unique())]
    handles.append(Line2D([], [], color="grey", linewidth=0.8, label="unigram loss (the recipe's validation masks)"))
    if exits is not None and margin is not None:
        handles.append(Line2D([], [], color="grey", marker="o", linestyle="none",
                              label=f"plateau exit: first validation {margin:g} nats below unigram"))
    fig.legend(handles=handles, loc="upper center", ncol=min(len(handles), 4), fontsize=8, bbox_to_anchor=(0.5, 1.0))
    fig.tight_layout(rect=(0, 0, 1, 0.86))
    numbers = dict(curves=curves.to_dict(orient="records"),
                   plateau_exits=None if exits is None else exits.to_dict(orient="records"), margin=margin)
    return save_figure(fig, out_dir, stem, numbers)


# (variant, column, title, the references drawn on the panel where given: key -> (colour, line style))
TABLE_PANELS = (("dstg", "pc1_pc2", "PC1+PC2 of the AP table",
                 {"paper_pc1_pc2": ("black", "-."), "holds_pc1_pc2": ("tab:red", "-")}),
                ("dstg", "low_freq_share", "DCT low-bin share of PC1/PC2", {"holds_low_freq_share": ("tab:red", "-")}),
                ("ap", "pc1_pc2", "PC1+PC2 of the position table", {}))


def plot_table_curves(tables: pd.DataFrame, out_dir, stem: str = "table_curves", exits: pd.DataFrame | None = None,
                      references: dict | None = None) -> dict:
    """The learned position tables' spectra against training tokens, as the zoo trained: DSTG's PC1+PC2 and DCT
    low-bin share, AP-NeoBERT's PC1+PC2 (its whole table), one line per (recipe, seed) styled as
    ``plot_zoo_curves`` (line style = recipe, colour = seed).  A dotted grey line is a Gaussian table of the same
    shape (chance); with ``exits`` a dot marks each run's plateau exit on its curve; ``references``:
    ``paper_pc1_pc2``, ``holds_pc1_pc2``, ``holds_low_freq_share`` (the paper's value and the claims table's
    "holds" thresholds), drawn on DSTG's panels.

    ``tables``: tidy rows with variant, recipe, seed, tokens, pc1_pc2, low_freq_share, control_pc1_pc2,
    control_low_freq_share (``experiments.zoo_curves``).
    """
    require_columns(tables, ["variant", "recipe", "seed", "tokens", "pc1_pc2", "low_freq_share", "control_pc1_pc2",
                             "control_low_freq_share"], "table curves")
    references = references or {}
    panels = [panel for panel in TABLE_PANELS if (tables.variant == panel[0]).any()]
    recipes = list(dict.fromkeys(tables.recipe))
    styles = recipe_styles(recipes)
    colors = plt.get_cmap("tab10").colors  # type: ignore[attr-defined]  # a ListedColormap
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.9), sharey=True, squeeze=False)
    for ax, (variant, column, title, marks) in zip(axes[0], panels):
        rows = tables[tables.variant == variant]
        for (recipe, seed), curve in rows.groupby(["recipe", "seed"], sort=False):
            curve = curve.sort_values("tokens")
            ax.plot(curve.tokens / 1e6, curve[column], linestyle=styles[recipe], color=colors[int(seed) % 10])
            exit_tokens = None if exits is None else exits[(exits.variant == variant) & (exits.recipe == recipe)
                                                           & (exits.seed == seed)].exit_tokens.dropna()
            if exit_tokens is not None and len(exit_tokens):
                at = float(exit_tokens.iloc[0])
                ax.plot(at / 1e6, np.interp(at, curve.tokens, curve[column]), "o", color=colors[int(seed) % 10], markersize=4)
        ax.axhline(float(rows[f"control_{column}"].mean()), color="grey", linewidth=1, linestyle=":")
        for key, (color, style) in marks.items():
            if key in references:
                ax.axhline(references[key], color=color, linewidth=0.9, linestyle=style)
        shape = rows.iloc[0]
        ax.set_title(f"{display_name(variant)}: {title}\n({int(shape.n_positions)} x {int(shape.width)} table)", fontsize=10)
        ax.set_xlabel("training tokens (millions)")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("share of variance / of DCT power")
    handles = [Line2D([], [], color="black", linestyle=styles[r], label=r) for r in recipes]
    handles += [Line2D([], [], color=colors[int(s) % 10], label=f"seed {s}") for s in sorted(tables.seed.unique())]
    handles.append(Line2D([], [], color="grey", linestyle=":", label="Gaussian table of the same shape (chance)"))
    if "paper_pc1_pc2" in references:
        handles.append(Line2D([], [], color="black", linestyle="-.", label=f"the paper: {references['paper_pc1_pc2']:g}"))
    if "holds_pc1_pc2" in references or "holds_low_freq_share" in references:
        handles.append(Line2D([], [], color="tab:red", label="the claims table's 'holds' threshold"))
    if exits is not None:
        handles.append(Line2D([], [], color="grey", marker="o", linestyle="none", label="the run's plateau exit"))
    fig.legend(handles=handles, loc="upper center", ncol=min(len(handles), 4), fontsize=8, bbox_to_anchor=(0.5, 1.0))
    fig.tight_layout(rect=(0, 0, 1, 0.80))
    numbers = dict(table_curves=tables.to_dict(orient="records"), references=references,
                   plateau_exits=None if exits is None else exits.to_dict(orient="records"),
                   bands={"dotted grey line": "mean PC1+PC2 / DCT low-bin share of i.i.d. Gaussian tables of the same shape",
                          "red line": "the claims table's 'holds' threshold (experiments.claims.RULES)",
                          "dash-dot black line": "the paper's PC1+PC2 of DSTG's table",
                          "dot": "the run's plateau exit (first validation 0.5 nats below the unigram loss)"})
    return save_figure(fig, out_dir, stem, numbers)


def plot_heldout_gain(heldout: pd.DataFrame, out_dir, stem: str = "heldout_gain", target: float | None = 0.08) -> dict:
    """Masked-token accuracy above the most-frequent-token rate, per variant and corpus: a bar for the mean
    over training seeds, one dot per seed, and the target line (``target`` points).

    ``heldout``: tidy rows with variant, seed, corpus, accuracy, most_frequent_accuracy
    (``experiments/zoo_heldout.py``'s heldout.csv).
    """
    require_columns(heldout, ["variant", "seed", "corpus", "accuracy", "most_frequent_accuracy"], "held-out accuracy")
    table = heldout.assign(gain=100 * (heldout.accuracy - heldout.most_frequent_accuracy))
    order = ordered_models(table.variant.unique())
    fig, ax = plt.subplots(figsize=(1.6 + 1.5 * len(order), 3.6))
    sns.barplot(table, x="variant", y="gain", hue="corpus", order=order, errorbar=None, alpha=0.55, ax=ax)
    sns.stripplot(table, x="variant", y="gain", hue="corpus", order=order, dodge=True, palette="dark:black", size=4,
                  legend=False, ax=ax)
    if target is not None:
        ax.axhline(100 * target, color="grey", linestyle="--", linewidth=0.9, label=f"target (+{100 * target:.0f} points)")
    ax.axhline(0.0, color="black", linewidth=0.6)
    ax.set_ylabel("accuracy - most-frequent rate (points)")
    ax.set_xlabel("")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(frameon=False, fontsize=8)
    return save_figure(fig, out_dir, stem, table.to_dict(orient="records"))


# the lever study's end readings: (column, title, its chance column or None)
LEVER_READINGS = (("pc1_pc2", "AP table PC1+PC2", "pc1_pc2_chance"),
                  ("participation_ratio", "AP table participation ratio", "participation_ratio_chance"),
                  ("low_freq_share", "AP table DCT share, first 4 bins\n(PC1 and PC2 pooled)", "low_freq_share_chance"),
                  ("position_r2_last", "token-position R$^2$ of the AP stream,\nlast block", None),
                  ("heldout_gain_points", "held-out gain over the\nmost-frequent token (points)", None))


def plot_lever_study(table_curves: pd.DataFrame, runs: pd.DataFrame, out_dir, base: str, stem: str = "levers") -> dict:
    """The lever study: left, the AP table's PC1+PC2 against training tokens, one colour per arm (the line: mean
    over seeds at each validation; the band: the seeds' range), the base arm in black; right, each end reading
    per arm (bar: mean over seeds, dots: seeds, whisker: the seeds' range, grey tick: Gaussian tables of the
    same shape, i.e. chance), with the base arm's range shaded across the panel so an arm outside it stands out.

    ``table_curves``: variant, arm, seed, tokens, pc1_pc2 (``diagnosis_table_curves.csv``); ``runs``: one row per
    run (``diagnosis_runs.csv``); ``base``: the arm every other arm changes one lever of.
    """
    require_columns(table_curves, ["arm", "seed", "tokens", "pc1_pc2"], "lever study table curves")
    require_columns(runs, ["arm", "seed"], "lever study runs")
    arms = list(dict.fromkeys(runs.arm))
    if base in arms:
        arms = [base] + [arm for arm in arms if arm != base]
    others = [a for a in arms if a != base]  # the base arm may have no run yet (a partial grid): every other one
    palette = dict(zip(others, sns.color_palette("tab20", max(1, len(others)))))
    palette[base] = (0.0, 0.0, 0.0)
    short = {arm: "base" if arm == base else arm.replace(base + ",", "+ ") for arm in arms}
    fig = plt.figure(figsize=(17.0, 7.5))
    grid = fig.add_gridspec(2, 4, width_ratios=[2.2, 1, 1, 1], hspace=0.75, wspace=0.35)
    _draw_table_curves(fig.add_subplot(grid[:, 0]), table_curves, arms, palette, short, base)
    for index, reading in enumerate(LEVER_READINGS):
        _draw_reading(fig.add_subplot(grid[index // 3, 1 + index % 3]), runs, reading, arms, palette, short, base)
    fig.text(0.5, -0.04, f"base = {base}. Bars: mean over seeds; dots: seeds; whiskers and bands: the seeds' range; "
             "shaded across a panel: the base arm's range; grey ticks: Gaussian tables of the same shape (chance).",
             ha="center", fontsize=8)
    numbers = dict(base=base, table_curves=table_curves.to_dict(orient="records"), runs=runs.to_dict(orient="records"),
                   bands={"band around a curve": "the seeds' range at that validation",
                          "whisker": "the seeds' range of an end reading",
                          "shaded band": "the base arm's range of that reading",
                          "grey tick": "the same reading for Gaussian tables of the same shape (chance)"})
    return save_figure(fig, out_dir, stem, numbers)


def _draw_table_curves(ax, table_curves: pd.DataFrame, arms: list, palette: dict, short: dict, base: str) -> None:
    """The lever study's left panel: each arm's AP-table PC1+PC2 against training tokens (seeds' mean and range)."""
    for arm in arms:
        curve = table_curves[table_curves.arm == arm]
        if curve.empty:
            continue
        # seeds validate at slightly different token counts: align them on the validation's index
        curve = curve.sort_values("step").assign(index=lambda c: c.groupby("seed").cumcount())
        by_step = curve.groupby("index").agg(tokens=("tokens", "mean"), mean=("pc1_pc2", "mean"),
                                             low=("pc1_pc2", "min"), high=("pc1_pc2", "max"))
        ax.plot(by_step.tokens / 1e6, by_step["mean"], color=palette[arm], linewidth=2.2 if arm == base else 1.3,
                label=f"{short[arm]} ({curve.seed.nunique()} seed{'s' if curve.seed.nunique() > 1 else ''})")
        ax.fill_between(by_step.tokens / 1e6, by_step.low, by_step.high, color=palette[arm], alpha=0.15, linewidth=0)
    ax.set_xlabel("training tokens (millions)")
    ax.set_ylabel("AP table PC1+PC2")
    ax.set_title("the table's collapse as it trains")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")


def _draw_reading(panel, runs: pd.DataFrame, reading: tuple, arms: list, palette: dict, short: dict, base: str) -> None:
    """One end-reading panel (``LEVER_READINGS``): per arm, the seeds' mean, values and range, and chance."""
    column, title, chance = reading
    base_values = runs.loc[runs.arm == base, column].dropna() if column in runs else pd.Series(dtype=float)
    if len(base_values):
        panel.axhspan(base_values.min(), base_values.max(), color="black", alpha=0.08, linewidth=0)
    for x, arm in enumerate(arms):
        values = runs.loc[runs.arm == arm, column].dropna() if column in runs else pd.Series(dtype=float)
        if len(values):
            panel.bar(x, values.mean(), color=palette[arm], alpha=0.6)
            panel.plot([x, x], [values.min(), values.max()], color="black", linewidth=1)
            panel.scatter(np.full(len(values), x), values, color="black", s=10, zorder=3)
        if chance and chance in runs and runs.loc[runs.arm == arm, chance].notna().any():
            panel.plot([x - 0.4, x + 0.4], [runs.loc[runs.arm == arm, chance].mean()] * 2, color="grey", linewidth=2)
    panel.set_xticks(range(len(arms)), [short[a] for a in arms], fontsize=6.5, rotation=60, ha="right",
                     rotation_mode="anchor")
    panel.set_title(title, fontsize=9)
    panel.grid(alpha=0.3, axis="y")


def plot_data_form(tables: pd.DataFrame, control: dict, out_dir, stem: str = "data_form", paper: float | None = None) -> dict:
    """The data-form study's position tables as they trained: PC1+PC2, participation ratio and DCT low-bin
    share against training tokens, one colour per arm (``arm`` column: a short label), one line style per seed.
    The grey band is the smooth structureless control (random walks of the table's shape: its 5-95% range,
    the dashed line its mean); ``control``: ``analysis.spectra.smooth_control``'s dict.  ``paper``: the paper's
    PC1+PC2, drawn dash-dotted."""
    require_columns(tables, ["arm", "seed", "tokens", "pc1_pc2", "participation_ratio", "low_freq_share"], "table curves")
    arms = list(dict.fromkeys(tables.arm))
    colors = distinct_colors(arms)
    styles: list[Literal["-", "--", ":", "-."]] = ["-", "--", ":", "-."]
    panels = [("pc1_pc2", "PC1+PC2"), ("participation_ratio", "participation ratio"),
              ("low_freq_share", "DCT share, bins 0-3 (pooled PC1/PC2)")]
    fig, axes = plt.subplots(1, len(panels), figsize=(14, 4.2))
    for ax, (column, title) in zip(axes, panels):
        ax.axhspan(control[f"{column}_q05"], control[f"{column}_q95"], color="grey", alpha=0.2, linewidth=0)
        ax.axhline(control[column], color="grey", linestyle="--", linewidth=1)
        for (arm, seed), curve in tables.groupby(["arm", "seed"], sort=False):
            curve = curve.sort_values("tokens")
            ax.plot(curve.tokens / 1e6, curve[column], color=colors[arm], linestyle=styles[int(seed) % len(styles)],
                    linewidth=1.4)
        if column == "pc1_pc2" and paper is not None:
            ax.axhline(paper, color="black", linestyle="-.", linewidth=0.9)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("training tokens (millions)")
        ax.grid(alpha=0.3)
    handles: list[Artist] = [Line2D([], [], color=colors[a], label=a) for a in arms]
    handles += [Line2D([], [], color="black", linestyle=styles[int(s) % len(styles)], label=f"seed {s}")
                for s in sorted(tables.seed.unique())]
    handles.append(Rectangle((0, 0), 1, 1, color="grey", alpha=0.2,
                                 label="random walks of the table's shape: 5-95% (dashed: mean)"))
    if paper is not None:
        handles.append(Line2D([], [], color="black", linestyle="-.", label=f"the paper: {paper:g}"))
    fig.legend(handles=handles, loc="upper center", ncol=4, fontsize=8, bbox_to_anchor=(0.5, 1.02))
    fig.tight_layout(rect=(0, 0, 1, 0.86))
    numbers = dict(table_curves=tables.to_dict(orient="records"),
                   control={k: v for k, v in control.items() if isinstance(v, (int, float, str))}, paper=paper,
                   bands={"grey band": "5-95% of 200 random-walk tables of the same shape (the smooth control)",
                          "dashed grey line": "their mean", "dash-dot black line": "the paper's PC1+PC2"})
    return save_figure(fig, out_dir, stem, numbers)
