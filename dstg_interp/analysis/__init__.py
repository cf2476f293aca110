"""Analysis: the measurements of the paper's findings beside the probes, each on models, tables or stores.

    from dstg_interp.analysis.spectra import analyze_table, position_table
    from dstg_interp.analysis.heads import classify_heads, head_stats_from_store
    from dstg_interp.analysis.extrapolate import extend_positions          # also: dstg-extend --model dstg ...
    from dstg_interp.analysis.invariance import measure_invariance, select_passages
    from dstg_interp.analysis.length_eval import long_windows, mlm_by_position
    from dstg_interp.analysis import patch_states, logit_lens, band_stats, decompose   # loaded on first use

Where it sits: data -> model -> encoders / store -> probes / analysis -> plots -> experiments.  This package
reads from the layers below it (documents and structured sequences from ``dstg_interp.data``, models
from ``dstg_interp.model``, states and logit terms through ``dstg_interp.encoders``, attention summaries
from an ``ActivationStore``) and returns tidy tables or arrays, which ``dstg_interp.plots`` draws and the
scripts in ``experiments/`` write.  It imports nothing from ``probes``, ``experiments`` or ``plots``.

Files:
    spectra.py      position tables (a learned AP table, or the per-position mean of a layer's states):
                    PCA over positions, participation ratio, PC curves, DCT-II of the leading PCs, a random
                    table of equal shape as control.  Needs only numpy / scipy.
    heads.py        attention-head classification: which logit term (semantic, AP, RP, content) drives each
                    head, from a batch (``head_summaries_from_cache``) or a store's attention summaries.
    head_split.py   the same classes for any encoder with queries and keys: each head's q.k split through the
                    per-position mean of q and k into position, context and cross terms.
    extrapolate.py  length extrapolation: extend a learned position table past ``max_positions`` along the
                    AP manifold (curve fit, repeat, stretch) and save the longer checkpoint; the dstg-extend
                    command.
    invariance.py   position-free semantic states: how far a passage's states move when only its offset or
                    its context changes, and retrieval recall of passages encoded alone.
    interventions.py  AP-stream interventions (interchange, shift, mean) and their effect on the MLM output.
    position_basis.py the position basis of a layer's hidden states (per-position means, their spectrum),
                    for models without a learned table.
    length_eval.py  evaluation past the trained length: full-length windows and MLM loss / accuracy by
                    position bucket (with a chunked reference).  The probes by range are in ``probes.by_range``.
    masked_inputs.py  masked batches (the same masked positions in every row) and the MLM-head check the
                    studies below share.
    patching.py     activation patching per stream (layer x position x sem / AP / full, and per head through
                    hook_z) on clean / corrupted pairs, scored on the MLM output at masked positions, and
                    attribution patching (one forward/backward pair) with its agreement to the exact patches.
    mlm_lens.py     an MLM logit lens: every layer's state through the model's own final norm and MLM head.
    rope_bands.py   RoPE heads split by frequency band (Barbero et al.): each band's share of a head's logit
                    variance over keys, heads labelled positional / semantic / mixed, a threshold sweep.
    decomposition.py  Song & Zhong's h = mean + position + context + residual per layer: variance shares, the
                    position part's rank, the position-context incoherence (max |cos|) against chance.
    ground_truth.py DSTG's AP coordinates as the known position subspace: each method's subspace for position
                    (per-position-mean PCs, probe span, LEACE, random, DAS, a learned rotation written on
                    ``encoders.edits``) scored against it by principal angles and by interchange on the MLM output;
                    ``score_method`` scores a method of your own beside the truth and a random subspace.
    geometry.py     the position geometry of any encoder, one row per table: PC1+PC2, PCs to 95%, participation
                    ratio, DCT low-bin share and 2-D MDS stress beside their smooth controls, position-tied
                    outlier dimensions; per-position sums of a layer's states gathered during the forward pass.
    sae.py          sparse autoencoders on one stream: EleutherAI's sparsify TopK SAE trained on a layer x
                    stream of a store (held-out FVU beside rank-k PCA), the [sae] extra.
    place_cells.py  a dictionary's latents (an SAE's codes) as place cells: receptive field over position, peak,
                    width at half maximum, eta² and tuning against a shuffled-position control; the latents on
                    the position curve's principal plane.

This package imports none of its modules itself: import the one you need, so that reading a spectrum
does not load the encoders (and transformers) that heads and invariance run on.  The functions of the
studies beyond position reading (``EXPORTS``) are also names of the package, each module loaded on first use.
"""

import importlib

EXPORTS = {
    "patching_pair": "patching", "patch_states": "patching", "patch_heads": "patching",
    "attribution_patch": "patching", "compare_attribution": "patching",
    "logit_lens": "mlm_lens",
    "band_stats": "rope_bands", "classify_band_heads": "rope_bands", "band_sweep": "rope_bands",
    "decompose": "decomposition", "decomposition_by_layer": "decomposition",
    "masked_batch": "masked_inputs",
    "true_position_basis": "ground_truth", "subspace_score": "ground_truth", "train_das": "ground_truth",
    "interchange_effect": "ground_truth",
    "layer_statistics": "geometry", "table_geometry": "geometry", "state_geometry": "geometry", "mds_stress": "geometry",
}
__all__ = sorted(EXPORTS)


def __getattr__(name: str):
    if name in EXPORTS:
        return getattr(importlib.import_module(f".{EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
