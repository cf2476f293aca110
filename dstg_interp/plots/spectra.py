"""Figures of position-table spectra (input: ``dstg_interp.analysis.spectra.TableSpectrum``, one per table).

    from dstg_interp.plots import plot_scree, plot_pc_curves, plot_dct_power
    plot_scree([dstg_spectrum, ap_spectrum], "figures/", stem="ap_scree")
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from ..analysis.spectra import TableSpectrum
from .output import model_color, save_figure


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
        ax_ratio.plot(head.component, head.ratio, "o-", color=color, label=spectrum.name, ms=3)
        ax_cumulative.plot(head.component, head.cumulative, "o-", color=color, label=spectrum.name, ms=3)
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
        ax_curve.set(xlabel="position", ylabel="score", title=f"{spectrum.name}: PCs along position")
        ax_curve.legend(fontsize=7)
        ax_curve.grid(alpha=0.3)
        if curves.shape[1] >= 2:
            points = ax_manifold.scatter(curves[1], curves[2], c=curves.index, cmap="viridis", s=10)
            ax_manifold.plot(curves[1], curves[2], color="grey", lw=0.5, alpha=0.5)
            fig.colorbar(points, ax=ax_manifold, label="position")
        ratios = spectrum.summary
        ax_manifold.set(xlabel=f"PC1 ({ratios['pc1']:.1%})", ylabel=f"PC2 ({ratios['pc2']:.1%})",
                        title=f"manifold: PC1+PC2 = {ratios['pc1_pc2']:.1%}")
        numbers[spectrum.name] = {"curves": spectrum.curves, "pc1": ratios["pc1"], "pc2": ratios["pc2"]}
    fig.tight_layout()
    return save_figure(fig, out_dir, stem, numbers)


def plot_dct_power(spectra, out_dir, stem: str = "dct_power", n_bins: int = 16) -> dict:
    """Share of each leading PC's DCT-II power per bin (first ``n_bins``), the low-frequency bins shaded;
    one panel per table."""
    spectra = _as_list(spectra)
    fig, axes = plt.subplots(1, len(spectra), figsize=(4.2 * len(spectra), 3.3), squeeze=False)
    numbers = {}
    for ax, spectrum in zip(axes[0], spectra):
        table = spectrum.dct[spectrum.dct.bin < n_bins]
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
        ax.set(xlabel="DCT-II bin", ylabel="share of power", ylim=(0, 1.02),
               title=f"{spectrum.name}\nfirst {k} bins: {spectrum.summary['low_freq_share']:.1%}{note}")
        ax.set_xticks(np.arange(0, n_bins, 2))
        ax.legend(fontsize=7)
        numbers[spectrum.name] = {"dct": table, "low_freq_share": spectrum.summary["low_freq_share"],
                                  "low_freq_share_per_pc": spectrum.summary["low_freq_share_per_pc"],
                                  "n_low_bins": k, "control_low_freq_share": control}
    fig.tight_layout()
    return save_figure(fig, out_dir, stem, numbers)
