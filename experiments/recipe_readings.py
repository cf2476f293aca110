"""What the recipe diagnosis reads from one finished run (``experiments/recipe_study.py --arms``).

    readings = run_readings(cfg)       # cached in <run>/readings.json, keyed by the checkpoint's step

Per run, each against what it is compared with:
- ``plateau_exit_step`` / ``plateau_exit_tokens``: the first validation at which the loss is
  ``PLATEAU_MARGIN`` nats below the unigram loss on the same masked tokens (the unigram plateau every run
  starts on); empty when the run never got there.
- ``heldout_accuracy`` on ``HELDOUT_DOCS`` held-out documents of the training corpus (``mlm_accuracy``:
  sentence windows, seeded masks), its ``most_frequent_accuracy`` (always guessing the training split's
  most frequent token, in the run's own tokenizer, on the same masked tokens) and the gain in points.
- ``pc1_pc2`` of the learned position table (rows = positions; DSTG: the 16-wide AP table, AP-NeoBERT: the
  128-wide table added to the token embedding) with ``pc1_pc2_chance``, the mean over Gaussian tables of
  the same shape, and the width-matched ``pc1_pc2_matched`` (the table on random 16-dim subspaces of its
  columns, ``analysis.spectra.width_matched``) with its chance: the number that compares across variants.
- ``position_r2_first`` / ``position_r2_last``: token-position R^2 of a ridge probe (``probes.positions``,
  grouped by document) on the position stream before the first block and after the last (DSTG: the AP
  subspace, AP-NeoBERT: the full state, which is its only one).
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from dstg_interp.analysis.heads import ap_kernel_offsets
from dstg_interp.analysis.spectra import analyze_table, smooth_control, width_matched
from dstg_interp.evaluation import mlm_accuracy
from dstg_interp.io import write_text_atomic
from dstg_interp.model.checkpoint import load_model
from dstg_interp.variants import variant_row
from dstg_interp.train import CHECKPOINT_DIR, CONFIG_FILE, STATE_FILE, TrainConfig, prepare_training_data, read_train_config
from probes.positions import probe_positions

PLATEAU_MARGIN = 0.5  # nats below the unigram loss: clearly off the plateau (the reference run ends 1.3 below)
HELDOUT_DOCS = 200
PROBE_DOCS = 200
READINGS_FILE = "readings.json"
READINGS_VERSION = 4  # 2: participation ratio, per-PC low-frequency share; 3: smooth control, layer-0 kernel; 4: data form, PC3
LOCAL_HEAD_MIN_VAR = 0.1  # a layer-0 head counts when its AP logit variance is >= this share of the largest
TABLE_CURVE_FILE = "table_curve.jsonl"  # the table's reading at every validation of a study run
MATCHED_WIDTH = 16  # DSTG's AP width: every table is also read projected onto random 16-dim subspaces


def matched_spectrum(table) -> dict:
    """PC1+PC2 of ``table`` on random ``MATCHED_WIDTH``-dim subspaces of its columns (mean over 50), and the
    Gaussian chance of that shape (``analysis.spectra.width_matched``): comparable across table widths."""
    table = np.asarray(table, dtype=np.float64)
    matched = width_matched(table, min(MATCHED_WIDTH, table.shape[1]))  # tiny test models are narrower
    return dict(pc1_pc2_matched=matched["matched_pc1_pc2"], pc1_pc2_matched_chance=matched["matched_control_pc1_pc2"])


def plateau_exit(curve: pd.DataFrame, margin: float = PLATEAU_MARGIN) -> tuple[float, float]:
    """(step, tokens) of the first validation row with ``val_loss <= unigram_loss - margin``; NaNs if none.
    ``curve``: rows with step, tokens, val_loss, unigram_loss."""
    below = curve.sort_values("step")
    below = below[below.val_loss <= below.unigram_loss - margin]
    if below.empty:
        return math.nan, math.nan
    return float(below.step.iloc[0]), float(below.tokens.iloc[0])


def run_readings(cfg: TrainConfig, heldout_docs: int = HELDOUT_DOCS, probe_docs: int = PROBE_DOCS) -> dict:
    """The held-out, table and probe readings of the run in ``cfg.out_dir`` (see the module docstring)."""
    run = Path(cfg.out_dir)
    step = json.loads((run / CHECKPOINT_DIR / STATE_FILE).read_text())["step"]
    cached = run / READINGS_FILE
    if cached.is_file():
        record = json.loads(cached.read_text())
        if record.get("step") == step and record.get("version") == READINGS_VERSION:
            readings = record["readings"]
            if "pc1_pc2" in readings and "pc1_pc2_matched" not in readings:  # read before width matching existed
                readings.update(matched_spectrum(load_model(run / CHECKPOINT_DIR).ap_table.detach()))
                write_text_atomic(cached, json.dumps(dict(record, readings=readings), indent=1) + "\n")
            return readings
    readings = model_readings(load_model(run / CHECKPOINT_DIR), cfg, heldout_docs, probe_docs)
    write_text_atomic(cached, json.dumps(dict(version=READINGS_VERSION, step=step, readings=readings), indent=1) + "\n")
    return readings


def model_readings(model, cfg: TrainConfig, heldout_docs: int = HELDOUT_DOCS, probe_docs: int = PROBE_DOCS) -> dict:
    """A trained model's readings: held-out gain on ``cfg.corpus``, the position table's spectrum with its
    Gaussian control, the position stream's token-position R^2 before the first block and after the last."""
    heldout = mlm_accuracy(model, cfg.corpus, n_docs=heldout_docs, train_config=cfg)
    readings = dict(heldout_accuracy=heldout["accuracy"], most_frequent_accuracy=heldout["most_frequent_accuracy"],
                    heldout_gain_points=100 * (heldout["accuracy"] - heldout["most_frequent_accuracy"]),
                    heldout_tokens=heldout["n_tokens"])
    readings.update(data_form(cfg, model.tokenizer))
    if model.config.spec.position_table:
        spectrum = analyze_table(model.ap_table.detach(), name="position table", n_control_draws=50)
        readings.update(pc1_pc2=spectrum.summary["pc1_pc2"], pc1_pc2_chance=spectrum.summary["control"]["pc1_pc2"],
                        participation_ratio=spectrum.summary["participation_ratio"],
                        participation_ratio_chance=spectrum.summary["control"]["participation_ratio"],
                        low_freq_share=spectrum.summary["low_freq_share"],
                        low_freq_share_chance=spectrum.summary["control"]["low_freq_share"],
                        pc1_low_freq_share=spectrum.summary["pc1_low_freq_share"],
                        pc2_low_freq_share=spectrum.summary["pc2_low_freq_share"], pc3=spectrum.summary["pc3"],
                        pcs_95=spectrum.summary["pcs_95"], **matched_spectrum(model.ap_table.detach()))
        readings.update(walk_control(model.ap_table.detach().numpy()))
        readings.update(position_r2(model, cfg, probe_docs))
    if model.config.spec.ap_stream:
        readings.update(kernel_readings(model, cfg.max_length))
    return readings


def data_form(cfg: TrainConfig, tokenizer=None) -> dict:
    """What the run's training split is, in the terms of the data-form study: its tokens (what the run sees
    once an epoch), sequences, mean length and the share of sequences that end inside the window (a document
    shorter than ``max_length``) rather than being cut by it."""
    train = prepare_training_data(cfg, tokenizer=tokenizer).train  # the model's own data (evaluation.mlm_accuracy's)
    lengths = np.asarray(train.lengths)
    return dict(train_split_tokens=int(train.n_tokens), train_sequences=int(len(lengths)),
                mean_sequence_length=float(lengths.mean()), ends_inside_window=float((lengths < cfg.max_length).mean()))


def walk_control(table) -> dict:
    """The smooth control of a table of this shape (``analysis.spectra.smooth_control``, random walks): its
    PC1+PC2, participation ratio and pooled DCT low-bin share, mean and 95% quantile (5% for the ratio)."""
    control = smooth_control(tuple(table.shape))
    return dict(pc1_pc2_walk=control["pc1_pc2"], pc1_pc2_walk_q95=control["pc1_pc2_q95"],
                participation_ratio_walk=control["participation_ratio"],
                participation_ratio_walk_q05=control["participation_ratio_q05"],
                low_freq_share_walk=control["low_freq_share"], low_freq_share_walk_q95=control["low_freq_share_q95"])


def kernel_readings(model, window: int) -> dict:
    """Layer 0's AP logit kernel over the training window (``analysis.heads.ap_kernel_offsets``): the share of
    its variance that is a function of the offset j - i (variance-weighted over heads, the largest, and the
    same through a random table), and the heads whose AP term moves attention (variance >= LOCAL_HEAD_MIN_VAR
    of the largest) with their modal attended offsets, largest variance first."""
    heads = ap_kernel_offsets(model, min(window, model.ap_table.shape[0]))
    weights = heads.ap_logit_var / heads.ap_logit_var.sum()
    active = heads[heads.ap_logit_var >= LOCAL_HEAD_MIN_VAR * heads.ap_logit_var.max()].sort_values(
        "ap_logit_var", ascending=False)
    return dict(l0_offset_share=float((weights * heads.offset_share).sum()),
                l0_offset_share_max=float(active.offset_share.max()),
                l0_key_share=float((weights * heads.key_share).sum()),
                l0_offset_share_random=float((weights * heads.offset_share_random).sum()),
                l0_active_heads=int(len(active)), l0_local_heads=int((active.modal_offset.abs() <= 1).sum()),
                l0_modal_offsets=" ".join(f"{offset:+d}" for offset in active.modal_offset))


def table_reading(model) -> dict:
    """The learned position table's spectrum now (PC1+PC2, participation ratio, pooled and per-PC share of
    DCT power in the first bins, mean row norm); empty for a variant without a table.  Cheap (one SVD of a
    [positions, d] table): the study reads it at every validation, so the table's collapse is a curve
    against tokens and not only an end point."""
    if not model.config.spec.position_table:
        return {}
    table = model.ap_table.detach().float()
    summary = analyze_table(table, n_control_draws=0).summary
    return dict(pc1_pc2=summary["pc1_pc2"], participation_ratio=summary["participation_ratio"],
                low_freq_share=summary["low_freq_share"], pc1_low_freq_share=summary["pc1_low_freq_share"],
                pc2_low_freq_share=summary["pc2_low_freq_share"], row_norm=float(table.norm(dim=1).mean()))


def read_table_curve(run_dir: Path) -> pd.DataFrame:
    """A run's ``table_curve.jsonl`` (one row per validation; a resumed run's repeated steps keep the last)."""
    path = Path(run_dir) / TABLE_CURVE_FILE
    if not path.is_file():
        return pd.DataFrame()
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return pd.DataFrame(rows).drop_duplicates("step", keep="last").sort_values("step").reset_index(drop=True)


def position_r2(model, cfg: TrainConfig, probe_docs: int) -> dict:
    """Token-position R^2 of the position stream before the first block (layer 0) and after the last."""
    subspace = "ap" if model.config.spec.ap_stream else "full"
    last = model.config.n_layers
    with tempfile.TemporaryDirectory(dir=Path(cfg.out_dir), prefix=".stores-") as stores:
        table = probe_positions(model, task="token", corpus=cfg.corpus, layers=[0, last], subspaces=[subspace],
                                controls=False, n_boot=0, max_docs=probe_docs, store_root=stores, model_name="run",
                                progress=False)
    by_layer = table.set_index("layer").r2
    return dict(position_r2_first=float(by_layer.loc[0]), position_r2_last=float(by_layer.loc[last]),
                position_subspace=subspace)


def summarize_arms(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean and sd over seeds of every reading, one row per (variant, arm); ``n_seeds`` and, for the plateau
    exit, how many seeds left the plateau at all (the mean is over those)."""
    numeric = [c for c in runs.columns if c not in ("variant", "arm", "seed", "position_subspace", "run_dir")
               and pd.api.types.is_numeric_dtype(runs[c])]
    rows = []
    for (variant, arm), group in runs.groupby(["variant", "arm"], sort=False):
        row = dict(variant=variant, arm=arm, n_seeds=len(group), seeds=" ".join(map(str, sorted(group.seed))),
                   seeds_off_plateau=int(group.plateau_exit_step.notna().sum()))
        for column in numeric:
            values = group[column].dropna().to_numpy(dtype=float)
            row[f"{column}_mean"] = float(values.mean()) if len(values) else np.nan
            row[f"{column}_sd"] = float(values.std(ddof=1)) if len(values) > 1 else np.nan
        rows.append(row)
    return pd.DataFrame(rows)


def shipped_arm(zoo: dict, name: str = "shipped zoo") -> str:
    """The shipped zoo's arm label, with its members' mean training budget (``zoo.json``): the zoo the diagnosis
    compared with had 8.3M tokens per member, the 6x128 zoo 14.2M, the authors'-recipe zoo shipped since 28.4M."""
    tokens = [s["train_tokens"] for s in zoo.values() if "seed" in s and s.get("train_tokens")]
    return f"{name} ({sum(tokens) / len(tokens) / 1e6:.1f}M tokens)" if tokens else name


def zoo_members(zoo_dir: Path, variants) -> tuple[dict, list[tuple[str, dict]]]:
    """A zoo folder's ``zoo.json`` and its (member, summary) pairs of ``variants`` that have a training seed."""
    zoo = json.loads((Path(zoo_dir) / "zoo.json").read_text())
    return zoo, [(m, s) for m, s in zoo.items() if s["variant"] in variants and "seed" in s]


def shipped_zoo_curves(zoo_dir: Path, variants=("ap", "dstg"), name: str = "shipped zoo") -> pd.DataFrame:
    """Validation curves of a zoo's members (``log.jsonl``), tidy as ``diagnosis_curves.csv``; ``name``: the
    zoo's arm label (with its budget, ``shipped_arm``)."""
    zoo, members = zoo_members(zoo_dir, variants)
    arm = shipped_arm(zoo, name)
    curves = []
    for member, summary in members:
        records = [json.loads(line) for line in (zoo_dir / member / "log.jsonl").read_text().splitlines() if line.strip()]
        logged = sorted((r["step"], r["tokens_seen"]) for r in records if "tokens_seen" in r)
        curve = pd.DataFrame([dict(step=r["step"], val_loss=r["val_loss"], val_accuracy=r.get("val_accuracy"))
                              for r in records if "val_loss" in r])
        curve["tokens"] = np.interp(curve.step, [0] + [s for s, _ in logged], [0] + [t for _, t in logged]).round().astype(int)
        curves.append(curve.assign(variant=summary["variant"], arm=arm, seed=int(summary["seed"]),
                                   unigram_loss=summary["unigram_loss"]))
    return pd.concat(curves, ignore_index=True)


def zoo_member_readings(zoo_dir: Path, variants=("dstg",), heldout_docs: int = HELDOUT_DOCS,
                        probe_docs: int = PROBE_DOCS) -> pd.DataFrame:
    """The members of a zoo folder read as a diagnosis run is read (``model_readings`` on each member's own
    training corpus and config, the plateau exit from its ``log.jsonl``), so a zoo enters a study as one more arm
    under the same protocol: the 6-layer test of the normed residual reads the authors'-recipe zoo so
    (``recipe_study --reference-zoo``)."""
    zoo_dir = Path(zoo_dir)
    zoo, members = zoo_members(zoo_dir, variants)
    curves = shipped_zoo_curves(zoo_dir, variants)
    arm = shipped_arm(zoo, name=zoo_dir.name)
    rows = []
    for member, summary in members:
        seed = int(summary["seed"])
        curve = curves[(curves.variant == summary["variant"]) & (curves.seed == seed)]
        exit_step, exit_tokens = plateau_exit(curve)
        saved = json.loads((zoo_dir / member / "train_config.json").read_text())
        if saved.get("tokenizer") and not Path(saved["tokenizer"]).is_absolute():  # relative to the run, not here
            saved["tokenizer"] = str(zoo_dir / member / Path(saved["tokenizer"]).name)
        with tempfile.TemporaryDirectory(prefix="zoo-readings-") as scratch:
            cfg = TrainConfig.from_dict(dict(saved, out_dir=scratch))  # position_r2's stores go to the scratch folder
            readings = model_readings(load_model(zoo_dir / member), cfg, heldout_docs, probe_docs)
        rows.append(dict(variant=summary["variant"], arm=arm, seed=seed, steps=summary["steps"], schedule_steps=cfg.max_steps,
                         batch=cfg.batch_size, train_tokens=summary["train_tokens"], train_seconds=summary.get("train_seconds"),
                         final_val_loss=summary["val_loss"], unigram_loss=summary["unigram_loss"],
                         plateau_exit_step=exit_step, plateau_exit_tokens=exit_tokens, **readings, run_dir=str(zoo_dir / member)))
    return pd.DataFrame(rows)


def zoo_table_curves(zoo_dir: Path, variants=("dstg",)) -> pd.DataFrame:
    """The position table's spectrum at every validation of each zoo member (``table_curve`` in its
    ``training.json``), tidy as ``diagnosis_table_curves.csv`` (arm: as ``zoo_member_readings`` names it)."""
    zoo_dir = Path(zoo_dir)
    zoo, members = zoo_members(zoo_dir, variants)
    arm = shipped_arm(zoo, name=zoo_dir.name)
    curves = []
    for member, summary in members:
        record = json.loads((zoo_dir / member / "training.json").read_text())
        if record.get("table_curve"):
            curves.append(pd.DataFrame(record["table_curve"]).assign(variant=summary["variant"], arm=arm,
                                                                     seed=int(summary["seed"])))
    return pd.concat(curves, ignore_index=True) if curves else pd.DataFrame()


def shipped_zoo_reference(zoo_dir: Path, figures_dir: Path, variants=("ap", "dstg")) -> pd.DataFrame:
    """The shipped zoo's members (the zoo recipe at its full budget, three seeds) read as the
    diagnosis reads a run, from committed files only: the plateau exit from each member's ``log.jsonl``
    against the unigram loss of ``zoo.json`` (the same validation batches), the held-out gain from
    ``figures/zoo/zoo.csv``, PC1+PC2 from ``figures/ap_manifold/spectra.csv`` and the token-position R^2
    before the first and after the last block from ``figures/probes/probes.csv``.  Not budget-matched with the
    diagnosis runs: a reference for the zoo recipe run longer."""
    zoo = json.loads((zoo_dir / "zoo.json").read_text())
    curves = shipped_zoo_curves(zoo_dir, variants)
    heldout = pd.read_csv(figures_dir / "zoo" / "zoo.csv")
    spectra = pd.read_csv(figures_dir / "ap_manifold" / "spectra.csv")
    spectra = spectra[spectra.source == "learned table"]
    probes = pd.read_csv(figures_dir / "probes" / "probes.csv")
    probes = probes[probes.task == "token"]
    rows = []
    for member, summary in zoo.items():
        variant = summary["variant"]
        if variant not in variants or "seed" not in summary:  # dstg-offset: another recipe
            continue
        seed = int(summary["seed"])
        exit_step, exit_tokens = plateau_exit(curves[(curves.variant == variant) & (curves.seed == seed)])
        gain = heldout[(heldout.variant == variant) & (heldout.seed == seed)]["en-mix_gain_points"]
        table = spectra[(spectra.model == variant) & (spectra.seed == seed)]
        subspace = "ap" if variant_row(variant).ap_stream else "full"
        r2 = probes[(probes.model == variant) & (probes.seed == seed) & (probes.subspace == subspace)].set_index("layer").r2
        last = int(r2.index.max()) if len(r2) else None
        matched = matched_spectrum(load_model(zoo_dir / member).ap_table.detach())
        batch = read_train_config(zoo_dir / member / CONFIG_FILE).batch_size
        rows.append(dict(variant=variant, arm=shipped_arm(zoo), seed=seed, steps=summary["steps"],
                         batch=batch, train_tokens=summary["train_tokens"], final_val_loss=summary["val_loss"],
                         unigram_loss=summary["unigram_loss"], plateau_exit_step=exit_step, plateau_exit_tokens=exit_tokens,
                         heldout_gain_points=float(gain.iloc[0]) if len(gain) else np.nan,
                         pc1_pc2=float(table.pc1_pc2.iloc[0]) if len(table) else np.nan,
                         pc1_pc2_chance=float(table.control_pc1_pc2.iloc[0]) if len(table) else np.nan,
                         **matched, position_r2_first=float(r2.loc[0]) if 0 in r2.index else np.nan,
                         position_r2_last=float(r2.loc[last]) if last is not None else np.nan))
    return pd.DataFrame(rows)
