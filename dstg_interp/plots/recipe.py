"""Learning curves of the recipe study and of the zoo: validation MLM loss against training tokens."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from .output import ordered_models, require_columns, save_figure, shared_legend


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
    colors = dict(zip(runs, plt.get_cmap("tab10").colors))  # type: ignore[attr-defined]  # a ListedColormap
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


def plot_zoo_curves(curves: pd.DataFrame, out_dir, stem: str = "zoo_curves") -> dict:
    """Validation loss against tokens for every variant, one line per (recipe, seed): the former zoo's recipe
    dashed, the new one solid, so the plateau each variant leaves (or not) is visible side by side.

    ``curves``: tidy rows with variant, recipe, seed, tokens, val_loss.
    """
    require_columns(curves, ["variant", "recipe", "seed", "tokens", "val_loss"], "zoo curves")
    variants = ordered_models(curves.variant.unique())
    recipes = list(dict.fromkeys(curves.recipe))
    styles = dict(zip(recipes, ["--", "-", ":", "-."]))
    fig, axes = plt.subplots(1, len(variants), figsize=(4.2 * len(variants), 3.6), sharey=True, squeeze=False)
    for ax, variant in zip(axes[0], variants):
        for (recipe, seed), curve in curves[curves.variant == variant].groupby(["recipe", "seed"], sort=False):
            curve = curve.sort_values("tokens")
            ax.plot(curve.tokens / 1e6, curve.val_loss, linestyle=styles[recipe], color=plt.get_cmap("tab10").colors[int(seed) % 10],  # type: ignore[attr-defined]
                    label=f"{recipe}, seed {seed}")
        if "unigram_loss" in curves:
            unigram = curves[curves.variant == variant].unigram_loss.dropna()
            if len(unigram):
                ax.axhline(float(unigram.iloc[0]), color="grey", linewidth=0.8, label="unigram")
        ax.set_title(variant)
        ax.set_xlabel("training tokens (millions)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("validation MLM loss")
    shared_legend(fig, axes[0], max_columns=6)
    return save_figure(fig, out_dir, stem, curves.to_dict(orient="records"))


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
