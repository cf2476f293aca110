"""Figures of position-table spectra (input: ``dstg_interp.analysis.spectra.TableSpectrum``, one per table).

    from dstg_interp.plots import plot_scree, plot_pc_curves, plot_dct_power
    plot_scree([dstg_spectrum, ap_spectrum], "figures/", stem="ap_scree")
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from ..analysis.spectra import TableSpectrum
from .output import MAX_COLUMNS, caption, display_name, model_color, save_figure


def _as_list(spectra) -> list[TableSpectrum]:
    spectra = [spectra] if isinstance(spectra, TableSpectrum) else list(spectra)
    if not spectra or not all(isinstance(s, TableSpectrum) for s in spectra):
        raise TypeError("expected a TableSpectrum or a non-empty list of them "
                        "(dstg_interp.analysis.spectra.analyze_table)")
    return spectra


def _color(spectrum: TableSpectrum, spectra: list[TableSpectrum]) -> str:
    return model_color(spectrum.name.split()[0], [s.name.split()[0] for s in spectra])


def plot_scree(spectra, out_dir, stem: str = "scree", n_components: int = 10) -> dict:
    """Explained-variance ratio per component (left) and cumulative variance (right), one line per table,
    with the Gaussian control (dotted) where the spectrum has one."""
    spectra = _as_list(spectra)
    fig, (ax_ratio, ax_cumulative) = plt.subplots(1, 2, figsize=(9, 3.5))
    numbers = {}
    for spectrum in spectra:
        head = spectrum.variance.head(n_components)
        color = _color(spectrum, spectra)
        ax_ratio.plot(head.component, head.ratio, "o-", color=color, label=_title(spectrum.name), ms=3)
        ax_cumulative.plot(head.component, head.cumulative, "o-", color=color, label=_title(spectrum.name), ms=3)
        control = spectrum.summary.get("control")
        if control:
            ax_cumulative.axhline(control["pc1_pc2"], color=color, ls=":", lw=1)
        numbers[spectrum.name] = {"variance": head, "summary": spectrum.summary}
    ax_ratio.set(xlabel="component", ylabel="explained variance ratio", title="scree")
    ax_cumulative.set(xlabel="component", ylabel="cumulative ratio", ylim=(0, 1.02),
                      title="cumulative (dotted: random PC1+PC2)")
    for ax in (ax_ratio, ax_cumulative):
        ax.grid(alpha=0.3)
    ax_cumulative.legend(fontsize=7, loc="lower right")
    return save_figure(fig, out_dir, stem, numbers)


def plot_pc_curves(spectra, out_dir, stem: str = "pc_curves") -> dict:
    """Per table: PC1 and PC2 along position (left) and the 2-D manifold PC1 vs PC2 coloured by position."""
    spectra = _as_list(spectra)
    fig, axes = plt.subplots(len(spectra), 2, figsize=(9, 3.2 * len(spectra)), squeeze=False)
    numbers = {}
    for (ax_curve, ax_manifold), spectrum in zip(axes, spectra):
        curves = spectrum.curves.pivot(index="position", columns="pc", values="score")  # [P, n_pcs]
        for pc, style in zip(curves.columns[:2], ("-", "--")):
            ax_curve.plot(curves.index, curves[pc], style, color=_color(spectrum, spectra), label=f"PC{pc}")
        ax_curve.set(xlabel="position", ylabel="score", title=f"{_title(spectrum.name)}: PCs along position")
        ax_curve.legend(fontsize=7)
        ax_curve.grid(alpha=0.3)
        if curves.shape[1] >= 2:
            points = ax_manifold.scatter(curves[1], curves[2], c=curves.index, cmap="viridis", s=10)
            ax_manifold.plot(curves[1], curves[2], color="grey", lw=0.5, alpha=0.5)
            fig.colorbar(points, ax=ax_manifold, label="position")
        ratios = spectrum.summary
        ax_manifold.set(xlabel=f"PC1 ({ratios['pc1']:.1%})", ylabel=f"PC2 ({ratios['pc2']:.1%})",
                        title=f"{_title(spectrum.name)}: PC1+PC2 = {ratios['pc1_pc2']:.1%}")
        numbers[spectrum.name] = {"curves": spectrum.curves, "pc1": ratios["pc1"], "pc2": ratios["pc2"]}
    fig.tight_layout()
    caption(fig, "Left: each position's score on the table's first two principal components (solid: PC1, dashed: PC2). "
                 "Right: the same positions as points in the PC1-PC2 plane, coloured by position; the grey line joins "
                 "consecutive positions, so a smooth curve is a table that changes smoothly along position. "
                 "Percentages: the share of the table's variance each PC explains.", y=-0.01)
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
    """Share of each leading PC's DCT-II power per bin, the low-frequency bins shaded; one panel per table,
    at most three to a row.  Each panel draws its first ``n_bins`` bins, or as many as hold 95% of every PC's
    power (``shown_bins``), so no panel is empty because its power lies beyond the default range."""
    spectra = _as_list(spectra)
    columns = min(len(spectra), MAX_COLUMNS)
    rows_of_panels = -(-len(spectra) // columns)
    fig, axes = plt.subplots(rows_of_panels, columns, figsize=(4.2 * columns, 3.4 * rows_of_panels), squeeze=False)
    for ax in axes.flat[len(spectra):]:
        ax.set_visible(False)
    numbers = {}
    for ax, spectrum in zip(axes.flat, spectra):
        drawn = shown_bins(spectrum.dct, n_bins)
        table = spectrum.dct[spectrum.dct.bin < drawn]
        pcs = sorted(table.pc.unique())
        width = 0.8 / max(len(pcs), 1)
        for i, pc in enumerate(pcs):
            rows = table[table.pc == pc]
            ax.bar(rows.bin + (i - (len(pcs) - 1) / 2) * width, rows.share, width=width,
                   color=_color(spectrum, spectra), alpha=1.0 - 0.45 * i, label=f"PC{pc}")
        k = spectrum.summary["n_low_bins"]
        ax.axvspan(-0.5, k - 0.5, color="grey", alpha=0.12)
        control = spectrum.summary.get("control", {}).get("low_freq_share")
        note = f"; random {control:.1%}" if control is not None else ""
        top = float(table.share.max()) if len(table) else 1.0
        total = int(spectrum.dct.bin.max()) + 1 if len(spectrum.dct) else drawn
        shown = "" if drawn >= total else f"; bins 0-{drawn - 1} of {total}"
        ax.set(xlabel=f"DCT-II bin (frequency along position{shown})", ylabel="share of the PC's power",
               ylim=(0, min(1.02, max(0.1, top * 1.15))), xlim=(-0.7, drawn - 0.3),
               title=f"{_title(spectrum.name)}\nfirst {k} bins: {spectrum.summary['low_freq_share']:.1%}{note}")
        ax.set_xticks(np.unique(np.linspace(0, drawn - 1, min(drawn, 9)).round().astype(int)))
        ax.legend(fontsize=7)
        numbers[spectrum.name] = {"dct": table, "bins_drawn": drawn, "low_freq_share": spectrum.summary["low_freq_share"],
                                  "low_freq_share_per_pc": spectrum.summary["low_freq_share_per_pc"],
                                  "n_low_bins": k, "control_low_freq_share": control}
    fig.tight_layout()
    caption(fig, "Bars: each leading PC's share of its DCT-II power per frequency bin (dark: PC1, light: PC2); "
                 "grey band: the low-frequency bins the title's share counts; 'random': the same share for a Gaussian "
                 "table of equal shape (the control). A panel draws the bins that hold 95% of each PC's power "
                 "(at least 16); the bins beyond it, up to one per position, hold the rest.")
    return save_figure(fig, out_dir, stem, numbers)


def _title(name: str) -> str:
    """A table's name with the zoo model in words ("dstg seed 0 AP table" -> "DSTG-NeoBERT seed 0 AP table")."""
    first, _, rest = str(name).partition(" ")
    return f"{display_name(first)} {rest}".strip()
