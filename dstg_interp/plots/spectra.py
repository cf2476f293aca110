"""Figures of position-table spectra (input: ``dstg_interp.analysis.spectra.TableSpectrum``, one per table).

    from dstg_interp.plots import plot_scree, plot_pc_curves, plot_dct_power
    plot_scree([dstg_spectrum, ap_spectrum], "figures/", stem="ap_scree")

Every seed is drawn.  Spectra of one table across the seeds of a zoo variant carry the same ``group`` in their
summary (``fig_ap_manifold`` sets it: the table's name without its seed) and a ``seed``; a figure draws each
group once, every seed in it (overlaid lines, one panel per seed, or steps of the mean with a dot per seed), and
titles it with the mean [lowest, highest] over its seeds, or says "one seed".  A spectrum without a group is a
group of one.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from ..analysis.spectra import SMOOTH_FAMILIES, TableSpectrum
from ..variants import VARIANTS
from .output import MAX_COLUMNS, caption, display_name, model_color, save_figure


def _as_list(spectra) -> list[TableSpectrum]:
    spectra = [spectra] if isinstance(spectra, TableSpectrum) else list(spectra)
    if not spectra or not all(isinstance(s, TableSpectrum) for s in spectra):
        raise TypeError("expected a TableSpectrum or a non-empty list of them "
                        "(dstg_interp.analysis.spectra.analyze_table)")
    return spectra


def seed_groups(spectra) -> dict[str, list[TableSpectrum]]:
    """The spectra of each table across seeds, in order of first appearance: by ``summary['group']`` where set,
    else by name; within a group by seed."""
    groups: dict[str, list[TableSpectrum]] = {}
    for spectrum in _as_list(spectra):
        groups.setdefault(str(spectrum.summary.get("group", spectrum.name)), []).append(spectrum)
    return {group: sorted(members, key=lambda s: s.summary.get("seed", 0)) for group, members in groups.items()}


def over_seeds(values) -> str:
    """``57.1% [46.3%, 58.0%] over 3 seeds``, or ``57.1% (one seed)``."""
    values = [float(v) for v in values]
    if len(values) == 1:
        return f"{values[0]:.1%} (one seed)"
    return f"{np.mean(values):.1%} [{min(values):.1%}, {max(values):.1%}] over {len(values)} seeds"


def _seed_numbers(values) -> dict:
    values = [float(v) for v in values]
    return {"mean": float(np.mean(values)), "low": min(values), "high": max(values), "n_seeds": len(values),
            "per_seed": values}


def smooth_q95(summary: dict, key: str) -> float | None:
    """The stronger smooth control's 95th percentile of ``key`` (``analysis.spectra.smooth_controls``), or None
    for a spectrum analysed without them."""
    values = [summary[f"{family}_{key}_q95"] for family in SMOOTH_FAMILIES if f"{family}_{key}_q95" in summary]
    return max(values) if values else None


def _seed_label(spectrum: TableSpectrum, members: list[TableSpectrum]) -> str:
    return f"seed {spectrum.summary['seed']}" if len(members) > 1 and "seed" in spectrum.summary else _title(spectrum.name)


def _color(group: str, groups) -> str:
    """A zoo table's model colour (its first word: ``dstg L6 ap``); any other table (MiniLM's, the random
    controls) a colour of its own."""
    keys = [g.split()[0] if g.split()[0] in VARIANTS else g for g in groups]
    key = group.split()[0] if group.split()[0] in VARIANTS else group
    return model_color(key, [k for k in dict.fromkeys(keys) if k not in VARIANTS])


def plot_scree(spectra, out_dir, stem: str = "scree", n_components: int = 10) -> dict:
    """Explained-variance ratio per component (left) and cumulative variance (right), one line per table and
    seed (a table's seeds share its colour), with the Gaussian control (dotted) and the smooth control's q95
    (dashed) of PC1+PC2 where the spectrum has them."""
    groups = seed_groups(spectra)
    fig, (ax_ratio, ax_cumulative) = plt.subplots(1, 2, figsize=(10, 3.8))
    numbers = {}
    for group, members in groups.items():
        color = _color(group, groups)
        label = f"{_title(group)}: PC1+PC2 {over_seeds(s.summary['pc1_pc2'] for s in members)}"
        for i, spectrum in enumerate(members):
            head = spectrum.variance.head(n_components)
            style = dict(color=color, ms=3, lw=1.4 if i == 0 else 0.9, alpha=1.0 if i == 0 else 0.6,
                         label=label if i == 0 else None)
            ax_ratio.plot(head.component, head.ratio, "o-", **style)
            ax_cumulative.plot(head.component, head.cumulative, "o-", **style)
        first = members[0].summary
        if first.get("control"):
            ax_cumulative.axhline(first["control"]["pc1_pc2"], color=color, ls=":", lw=1)
        smooth = smooth_q95(first, "pc1_pc2")
        if smooth is not None:
            ax_cumulative.axhline(smooth, color=color, ls="--", lw=0.8, alpha=0.7)
        numbers[group] = {"pc1_pc2": _seed_numbers(s.summary["pc1_pc2"] for s in members),
                          "smooth_control_pc1_pc2_q95": smooth,
                          "tables": {s.name: {"seed": s.summary.get("seed"), "variance": s.variance.head(n_components),
                                              "summary": s.summary} for s in members}}
    ax_ratio.set(xlabel="component", ylabel="explained variance ratio", title="scree (one line per seed)")
    ax_cumulative.set(xlabel="component", ylabel="cumulative ratio", ylim=(0, 1.02),
                      title="cumulative (dotted: Gaussian table; dashed: smooth-control q95)")
    for ax in (ax_ratio, ax_cumulative):
        ax.grid(alpha=0.3)
    ax_cumulative.legend(fontsize=6.5, loc="lower right")
    caption(fig, "One line per table and seed (a table's seeds share its colour; legend: PC1+PC2 as the mean "
                 "[lowest, highest] over the seeds). Dotted: PC1+PC2 of a Gaussian table of the same shape; dashed: "
                 "the 95th percentile of the stronger structureless smooth control (random walks, or white noise "
                 "smoothed to the table's own roughness), the bar a 2-D manifold must clear.", y=-0.03)
    return save_figure(fig, out_dir, stem, numbers)


def _aligned(curves, reference):
    """PC scores with each PC's sign chosen to agree with ``reference``'s (seeds' PCs have arbitrary signs)."""
    common = curves.index.intersection(reference.index)
    for pc in curves.columns.intersection(reference.columns):
        if float(np.dot(curves.loc[common, pc], reference.loc[common, pc])) < 0:
            curves[pc] = -curves[pc]
    return curves


def plot_pc_curves(spectra, out_dir, stem: str = "pc_curves") -> dict:
    """Per table (a row): PC1 and PC2 along position for every seed (left; signs aligned to the first seed),
    and each seed's 2-D manifold PC1 vs PC2 coloured by position (one panel per seed)."""
    groups = seed_groups(spectra)
    n_seeds = max(len(members) for members in groups.values())
    fig, axes = plt.subplots(len(groups), 1 + n_seeds, figsize=(4.3 * (1 + n_seeds), 3.3 * len(groups)),
                             squeeze=False)
    numbers = {}
    for row, (group, members) in zip(axes, groups.items()):
        color = _color(group, groups)
        ax_curve, reference = row[0], None
        for i, spectrum in enumerate(members):
            curves = spectrum.curves.pivot(index="position", columns="pc", values="score")  # [P, n_pcs]
            curves = curves if reference is None else _aligned(curves, reference)
            reference = curves if reference is None else reference
            for pc, style in zip(curves.columns[:2], ("-", "--")):
                ax_curve.plot(curves.index, curves[pc], style, color=color, lw=1.2 if i == 0 else 0.8,
                              alpha=1.0 if i == 0 else 0.55, label=f"PC{pc}" if i == 0 else None)
            ax_manifold = row[1 + i]
            if curves.shape[1] >= 2:
                points = ax_manifold.scatter(curves[1], curves[2], c=curves.index, cmap="viridis", s=8)
                ax_manifold.plot(curves[1], curves[2], color="grey", lw=0.5, alpha=0.5)
                fig.colorbar(points, ax=ax_manifold, label="position")
            ratios = spectrum.summary
            ax_manifold.set(xlabel=f"PC1 ({ratios['pc1']:.1%})", ylabel=f"PC2 ({ratios['pc2']:.1%})",
                            title=f"{_seed_label(spectrum, members)}: PC1+PC2 = {ratios['pc1_pc2']:.1%}")
        for ax in row[1 + len(members):]:
            ax.set_visible(False)
        seeds = "every seed" if len(members) > 1 else "one seed"
        ax_curve.set(xlabel="position", ylabel="score",
                     title=f"{_title(group)} ({seeds})\nPC1+PC2 {over_seeds(s.summary['pc1_pc2'] for s in members)}")
        ax_curve.title.set_fontsize(9)
        ax_curve.legend(fontsize=7)
        ax_curve.grid(alpha=0.3)
        numbers[group] = {"pc1_pc2": _seed_numbers(s.summary["pc1_pc2"] for s in members),
                          "tables": {s.name: {"seed": s.summary.get("seed"), "curves": s.curves, "pc1": s.summary["pc1"],
                                              "pc2": s.summary["pc2"]} for s in members}}
    fig.tight_layout()
    caption(fig, "A row per table. Left: each position's score on the table's first two principal components "
                 "(solid: PC1, dashed: PC2), one line per seed (faint: later seeds, signs aligned to the first). "
                 "Right: each seed's positions as points in its own PC1-PC2 plane, coloured by position; the grey line "
                 "joins consecutive positions, so a smooth curve is a table that changes smoothly along position. "
                 "Percentages: the share of the table's variance each PC explains; the row title gives PC1+PC2 as the "
                 "mean [lowest, highest] over the seeds.", y=-0.01)
    return save_figure(fig, out_dir, stem, numbers)


def shown_bins(dct, n_bins: int, power: float = 0.95) -> int:
    """How many DCT bins a panel draws: at least ``n_bins``, and enough that every PC's first bins hold
    ``power`` of its power (a table whose PCs oscillate fast, like MiniLM's, has it far beyond bin 16)."""
    needed = 0
    for _, rows in dct.groupby("pc"):
        cumulative = rows.sort_values("bin").share.cumsum().to_numpy()
        needed = max(needed, int(np.searchsorted(cumulative, power)) + 1)
    return max(n_bins, needed)


def plot_dct_power(spectra, out_dir, stem: str = "dct_power", n_bins: int = 16) -> dict:
    """Share of each leading PC's DCT-II power per bin, the low-frequency bins shaded; one panel per table (steps:
    the mean over its seeds, dots: each seed), at most three to a row.  Each panel draws its first ``n_bins``
    bins, or as many as hold 95% of every PC's power in any seed (``shown_bins``), so no panel is empty because
    its power lies beyond the default range."""
    groups = seed_groups(spectra)
    columns = min(len(groups), MAX_COLUMNS)
    rows_of_panels = -(-len(groups) // columns)
    fig, axes = plt.subplots(rows_of_panels, columns, figsize=(4.4 * columns, 3.6 * rows_of_panels), squeeze=False)
    for ax in axes.flat[len(groups):]:
        ax.set_visible(False)
    numbers = {}
    for ax, (group, members) in zip(axes.flat, groups.items()):
        color = _color(group, groups)
        drawn = max(shown_bins(s.dct, n_bins) for s in members)
        tables = [s.dct[s.dct.bin < drawn] for s in members]
        pcs = sorted(tables[0].pc.unique())
        top = 0.1
        for i, pc in enumerate(pcs):
            per_seed = [t[t.pc == pc].set_index("bin").share for t in tables]
            mean = sum(per_seed) / len(per_seed)
            edges = np.append(mean.index.to_numpy(), mean.index[-1] + 1) - 0.5  # one step per bin, centred on it
            # one artist per PC (a bar per bin made a wide table's hundreds of bins slow to draw): PC1 filled,
            # the later PCs as outlines over it
            ax.stairs(mean.to_numpy(), edges, fill=i == 0, color=color, alpha=0.85 if i == 0 else 1.0,
                      linewidth=1.4, linestyle="-" if i < 2 else ":", label=f"PC{pc}")
            if len(members) > 1:
                for shares in per_seed:
                    ax.plot(shares.index, shares.to_numpy(), ".", color="black", ms=2.5, alpha=0.7)
            top = max(top, max(float(s.max()) for s in per_seed))
        first = members[0].summary
        k = first["n_low_bins"]
        ax.axvspan(-0.5, k - 0.5, color="grey", alpha=0.12)
        control = first.get("control", {}).get("low_freq_share")
        smooth = smooth_q95(first, "low_freq_share")
        notes = "".join([f"; Gaussian {control:.1%}" if control is not None else "",
                         f"; smooth q95 {smooth:.1%}" if smooth is not None else ""])
        total = int(members[0].dct.bin.max()) + 1 if len(members[0].dct) else drawn
        shown = "" if drawn >= total else f"; bins 0-{drawn - 1} of {total}"
        ax.set(xlabel=f"DCT-II bin (frequency along position{shown})", ylabel="share of the PC's power",
               ylim=(0, min(1.02, top * 1.15)), xlim=(-0.7, drawn - 0.3))
        ax.set_title(f"{_title(group)}\nbins 1-{k - 1}: {over_seeds(s.summary['low_freq_share'] for s in members)}"
                     f"\n{notes.lstrip('; ')}", fontsize=8)
        ax.set_xticks(np.unique(np.linspace(0, drawn - 1, min(drawn, 9)).round().astype(int)))
        ax.legend(fontsize=7)
        numbers[group] = {"low_freq_share": _seed_numbers(s.summary["low_freq_share"] for s in members),
                          "bins_drawn": drawn, "n_low_bins": k, "control_low_freq_share": control,
                          "smooth_control_low_freq_share_q95": smooth,
                          "tables": {s.name: {"seed": s.summary.get("seed"), "dct": t,
                                              "low_freq_share": s.summary["low_freq_share"],
                                              "low_freq_share_per_pc": s.summary["low_freq_share_per_pc"]}
                                     for s, t in zip(members, tables)}}
    fig.tight_layout()
    caption(fig, "Steps: each leading PC's share of its DCT-II power per frequency bin, the mean over the table's seeds "
                 "(filled: PC1; outline: PC2; dotted outline: PC3 and later); black dots: each seed. Grey band: the low-frequency bins the title's share "
                 "counts (bin 0 is empty after centring), as the mean [lowest, highest] over seeds; 'Gaussian': the "
                 "same share for a Gaussian table of equal shape; 'smooth q95': the 95th percentile of the stronger "
                 "structureless smooth control. A panel draws the bins that hold 95% of each PC's power (at least 16).")
    return save_figure(fig, out_dir, stem, numbers)


def _title(name: str) -> str:
    """A table's name with the zoo model in words ("dstg seed 0 AP table" -> "DSTG-NeoBERT seed 0 AP table")."""
    first, _, rest = str(name).partition(" ")
    return f"{display_name(first)} {rest}".strip()
