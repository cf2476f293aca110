"""Paper figures: every function writes ``stem``.png, ``stem``.pdf and ``stem``.json (the numbers behind
the figure) into ``out_dir`` (created if needed; ``FigureOutputError`` if it cannot be written) and returns
their paths.  Seaborn on matplotlib's Agg backend; one colour per zoo model (``Variant.color``).  The figures
by layer read the measurement layout of ``plots.tidy`` (one row per model x subspace x layer x metric).

    from dstg_interp.analysis.spectra import analyze_table, position_table
    from dstg_interp.plots import plot_scree
    plot_scree([analyze_table(position_table(model), name="dstg AP table")], "figures/", stem="ap_scree")

    spectra (TableSpectrum list)   plot_scree, plot_pc_curves, plot_dct_power
    heads (classify_heads table)   plot_head_map, plot_share_scatter, plot_head_sweep (with threshold_sweep)
    any measurements by layer      measurements, plot_by_layer (lines with interval bands, facets by any key)
    probe results (tidy R² table)  plot_r2_by_layer
    Holmes (probes.holmes.aggregate tables)  plot_holmes_areas (winning_rates), plot_holmes_counts (a_vs_b),
                                   plot_holmes_scores (scores)
    invariance tables              plot_invariance_by_layer (cosine / rel. L2), plot_recall_by_layer (recall@k)
    length extrapolation           plot_mlm_by_position, plot_probe_ranges, plot_extended_tables
    patching and RoPE bands        plot_patching_map, plot_attribution_agreement, plot_band_shares
    ground truth (fig_ground_truth's scores)  plot_ground_truth (each method's subspace vs DSTG's AP stream)
    position geometry (fig_geometry's rows)   plot_geometry_leaderboard, plot_geometry_by_layer
    place cells (fig_place_cells' tables)  plot_receptive_fields, plot_position_tiling (SAE latents over position)
"""

from .extrapolation import at_last_layer, plot_extended_tables, plot_mlm_by_position, plot_probe_ranges
from .geometry import plot_geometry_by_layer, plot_geometry_leaderboard
from .ground_truth import plot_ground_truth
from .heads import plot_head_map, plot_head_sweep, plot_share_scatter
from .holmes import plot_holmes_areas, plot_holmes_counts, plot_holmes_scores
from .invariance import plot_invariance_by_layer, plot_recall_by_layer
from .patching import plot_attribution_agreement, plot_band_shares, plot_patching_map
from .output import LABEL_COLORS, FigureOutputError, model_color, model_palette, save_figure
from .place_cells import plot_position_tiling, plot_receptive_fields
from .probes import plot_r2_by_layer
from .spectra import plot_dct_power, plot_pc_curves, plot_scree
from .tidy import MEASUREMENT_COLUMNS, measurements, plot_by_layer

__all__ = [
    "FigureOutputError",
    "LABEL_COLORS",
    "model_color",
    "model_palette",
    "MEASUREMENT_COLUMNS",
    "measurements",
    "plot_by_layer",
    "save_figure",
    "plot_scree",
    "plot_pc_curves",
    "plot_dct_power",
    "plot_head_map",
    "plot_share_scatter",
    "plot_r2_by_layer",
    "plot_receptive_fields",
    "plot_position_tiling",
    "plot_holmes_areas",
    "plot_holmes_counts",
    "plot_holmes_scores",
    "plot_invariance_by_layer",
    "plot_recall_by_layer",
    "plot_mlm_by_position",
    "plot_probe_ranges",
    "at_last_layer",
    "plot_extended_tables",
    "plot_patching_map",
    "plot_attribution_agreement",
    "plot_band_shares",
    "plot_ground_truth",
    "plot_geometry_leaderboard",
    "plot_geometry_by_layer",
]
