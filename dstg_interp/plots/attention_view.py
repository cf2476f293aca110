"""Interactive per-stream attention views: every head's pattern and, for DSTG, its three logit terms side by side.

    from dstg_interp.plots.attention_view import attention_view
    view = attention_view("dstg", "The miller mended the door.")   # a zoo name, a folder, a model, an encoder
    view                                   # in Jupyter: displays itself (``_repr_html_``)
    view.save("views/dstg.html")          # one standalone file: data and script inline, nothing fetched
    dstg-figures attention-view --model dstg --text "The miller mended the door." --out views/dstg

One card per (block, head): its class from the head-classification rule (``dstg_interp.analysis.heads``: computed
on this text, or read from a study's ``heads.csv`` with ``heads=``) and one heat map per panel: ``pattern`` (the
softmax weights) and each additive logit term as it enters the softmax (DSTG: ``sem``, ``ap``, ``rp``; RoPE / AP:
``content``; RP-NeoBERT: ``content``, ``rp``).  An HF encoder has its pattern only, and no head class.  Rows are
queries, columns keys; a term's colour scale is symmetric around 0, per map.  Hovering a cell names the query and
key tokens and the value.

Bad input is one line: a text longer than the model's positions, a panel (stream) the model does not have
(``AttentionViewError``, a ValueError).  The page needs no network: a self-contained HTML file, its JavaScript
inline, the numbers as base64 float32.
"""

from __future__ import annotations

import base64
import html
import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ..analysis.heads import head_table
from ..encoders import open_encoder
from ..io import write_text_atomic

PATTERN = "pattern"
PANEL_TITLES = {PATTERN: "attention (softmax)", "sem": "semantic term", "ap": "AP term", "rp": "RP term",
                "content": "content term"}
LABEL_TERMS = ("sem", "ap", "rp", "content")  # the shares a card shows beside its label, where present


class AttentionViewError(ValueError):
    """A view that cannot be drawn (text too long, a panel the model lacks); the message is one line."""


@dataclass
class AttentionView:
    """One text through one model: ``values[panel]`` is [n_blocks, n_heads, T, T] (float32), ``labels`` one row per
    head (layer, head, label and the term shares) or empty."""

    model_name: str
    tokens: list[str]
    panels: tuple[str, ...]
    values: dict[str, np.ndarray]
    labels: pd.DataFrame = field(default_factory=pd.DataFrame)
    label_source: str = ""

    @property
    def n_blocks(self) -> int:
        return int(self.values[self.panels[0]].shape[0])

    @property
    def n_heads(self) -> int:
        return int(self.values[self.panels[0]].shape[1])

    def data(self) -> dict:
        """What the page's script reads (JSON): tokens, panels, per-head labels, base64 float32 maps."""
        heads = []
        for block in range(self.n_blocks):
            for head in range(self.n_heads):
                heads.append({"layer": block, "head": head, **self._label(block, head)})
        maps = {panel: base64.b64encode(np.ascontiguousarray(self.values[panel], dtype="<f4").tobytes()).decode()
                for panel in self.panels}
        return {"model": self.model_name, "tokens": self.tokens, "panels": list(self.panels),
                "titles": {p: PANEL_TITLES.get(p, p) for p in self.panels}, "n_blocks": self.n_blocks,
                "n_heads": self.n_heads, "heads": heads, "maps": maps, "label_source": self.label_source}

    def _label(self, block: int, head: int) -> dict:
        if self.labels.empty:
            return {"label": None, "shares": {}}
        row = self.labels[(self.labels.layer == block) & (self.labels["head"] == head)]
        if row.empty:
            return {"label": None, "shares": {}}
        record = row.iloc[0]
        shares = {t: round(float(record[f"share_{t}"]), 3) for t in LABEL_TERMS
                  if f"share_{t}" in record and pd.notna(record[f"share_{t}"])}
        return {"label": str(record["label"]), "shares": shares}

    def fragment(self) -> str:
        """The view as an HTML fragment (a div, its style and its script), as a notebook cell shows it."""
        root = f"attention-view-{uuid.uuid4().hex[:10]}"
        payload = json.dumps(self.data()).replace("</", "<\\/")  # no "</script>" inside the script
        return (f'<div id="{root}" class="attention-view"></div>\n<style>{_STYLE}</style>\n'
                f"<script>\n{_SCRIPT}\ndstgAttentionView(document.getElementById({json.dumps(root)}), {payload});\n"
                "</script>\n")

    def _repr_html_(self) -> str:
        return self.fragment()

    def to_html(self) -> str:
        """A standalone page: the fragment in a document of its own."""
        title = html.escape(f"{self.model_name}: attention by head and logit term")
        return (f'<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{title}</title>\n</head>\n'
                f"<body>\n{self.fragment()}</body>\n</html>\n")

    def save(self, path: str | Path) -> Path:
        """Write the standalone page (under a temporary name, then renamed)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, self.to_html())
        return path


def attention_view(model, text: str, panels: list[str] | tuple[str, ...] | None = None,
                   heads: pd.DataFrame | None = None, name: str | None = None) -> AttentionView:
    """The attention view of ``text`` through ``model`` (anything ``open_encoder`` takes).

    Args:
        panels: what each head shows, in order: ``"pattern"`` and the model's logit terms (default: all of them).
        heads: a ``classify_heads`` table (e.g. a study's ``heads.csv``) whose rows for this model (``model`` column
            = its name; the first training seed when there is a ``seed`` column) give the head classes; default:
            classified on this text (``analysis.heads.head_table``; DSTG and our baselines only).
        name: the model's name on the page (default: the encoder's).
    """
    encoder = open_encoder(model)
    model_name = name or encoder.name
    available = (PATTERN, *encoder.logit_terms) if encoder.kind == "dstg-interp" else (PATTERN,)
    panels = tuple(available if panels is None else panels)
    unknown = [p for p in panels if p not in available]
    if unknown or not panels:
        raise AttentionViewError(f"{model_name} has no panel {', '.join(map(repr, unknown)) or '(none asked)'}: "
                                 f"its attention views are {', '.join(available)}")
    if encoder.tokenizer is None:
        raise AttentionViewError(f"{model_name} has no tokenizer: a text cannot be tokenized for it")
    encoding = encoder.tokenizer.encode(text)
    ids, tokens = list(encoding.ids), list(encoding.tokens)
    if len(ids) > encoder.max_positions:
        raise AttentionViewError(f"the text is {len(ids)} tokens; {model_name} reads at most {encoder.max_positions} "
                                 "positions: shorten it")
    token_ids = torch.tensor([ids], dtype=torch.long)
    mask = torch.ones_like(token_ids, dtype=torch.bool)
    blocks = encoder.attention(token_ids, mask)
    values = {}
    for panel in panels:
        key = panel if panel in blocks[0] else next(iter(blocks[0]))  # an HF encoder's pattern may be its scores
        values[panel] = np.stack([blocks[b][key][0].float().cpu().numpy() for b in range(encoder.n_layers)])
    labels, source = pd.DataFrame(), ""
    if heads is not None:
        labels = heads[heads.model == model_name] if "model" in heads else heads
        if "seed" in labels and len(labels):
            labels = labels[labels.seed == labels.seed.min()]
        source = "the given head table"
        if labels.empty:
            raise AttentionViewError(f"the head table has no rows for model {model_name!r}: its models are "
                                     f"{', '.join(map(str, heads['model'].unique())) if 'model' in heads else '(none)'}")
    elif encoder.kind == "dstg-interp":
        labels, source = head_table(encoder, token_ids, mask, model_name=model_name), "classified on this text"
    return AttentionView(model_name, tokens, panels, values, labels, source)


_STYLE = """
.attention-view{font:12px/1.35 system-ui,sans-serif;color:#222}
.attention-view .controls{margin:4px 0 8px}
.attention-view .grid{display:grid;gap:8px}
.attention-view .head{border:1px solid #ccc;border-radius:4px;padding:4px 6px;background:#fff}
.attention-view .head h4{margin:0 0 3px;font-size:12px}
.attention-view .label{padding:0 4px;border-radius:3px;color:#fff;font-weight:600}
.attention-view .maps{display:grid;grid-template-columns:repeat(2,max-content);gap:4px 6px}
.attention-view .shares{font-size:10px;color:#444;margin-bottom:2px}
.attention-view .map span{display:block;font-size:10px;color:#555}
.attention-view canvas{image-rendering:pixelated;border:1px solid #eee;cursor:crosshair}
.attention-view .tip{min-height:16px;font-family:monospace;margin:2px 0 6px}
"""

# The renderer: plain DOM and canvas, no library (the page must open where nothing can be fetched).
_SCRIPT = r"""
function dstgAttentionView(root, data) {
  var LABEL_COLORS = {structure: "#1b9e77", semantic: "#7570b3", RP: "#d95f02", mixed: "#888888",
                      positional: "#1b9e77", content: "#7570b3"};
  var T = data.tokens.length, H = data.n_heads, L = data.n_blocks;
  var maps = {};
  data.panels.forEach(function (panel) {
    var bytes = Uint8Array.from(atob(data.maps[panel]), function (c) { return c.charCodeAt(0); });
    maps[panel] = new Float32Array(bytes.buffer);
  });
  function slice(panel, layer, head) {
    var size = T * T, start = (layer * H + head) * size;
    return maps[panel].subarray(start, start + size);
  }
  function colour(panel, v, scale) {
    if (panel === "pattern") {  // white -> dark blue, sqrt so that small weights stay visible
      var t = Math.sqrt(Math.max(0, Math.min(1, v)));
      return [Math.round(255 - 225 * t), Math.round(255 - 175 * t), Math.round(255 - 95 * t)];
    }
    var s = scale > 0 ? Math.max(-1, Math.min(1, v / scale)) : 0;  // blue < 0 < red, symmetric per map
    return s >= 0 ? [255, Math.round(255 - 200 * s), Math.round(255 - 200 * s)]
                  : [Math.round(255 + 200 * s), Math.round(255 + 200 * s), 255];
  }
  var cell = Math.max(2, Math.min(10, Math.floor(120 / T)));
  var title = document.createElement("div");
  title.innerHTML = "<b></b> &middot; " + T + " tokens &middot; " + L + " blocks &times; " + H + " heads";
  title.firstChild.textContent = data.model;
  if (data.label_source) { title.appendChild(document.createTextNode(" \u00b7 head classes " + data.label_source)); }
  root.appendChild(title);
  var controls = document.createElement("div");
  controls.className = "controls";
  var select = document.createElement("select");
  var all = document.createElement("option");
  all.value = "all"; all.textContent = "all blocks";
  select.appendChild(all);
  for (var l = 0; l < L; l++) {
    var option = document.createElement("option");
    option.value = String(l); option.textContent = "block " + l;
    select.appendChild(option);
  }
  controls.appendChild(document.createTextNode("show "));
  controls.appendChild(select);
  root.appendChild(controls);
  var tip = document.createElement("div");
  tip.className = "tip";
  tip.textContent = "hover a cell: query \u2192 key, value";
  root.appendChild(tip);
  var grid = document.createElement("div");
  grid.className = "grid";
  grid.style.gridTemplateColumns = "repeat(" + H + ", max-content)";  // one row per block
  root.appendChild(grid);
  data.heads.forEach(function (info) {
    var card = document.createElement("div");
    card.className = "head";
    card.setAttribute("data-layer", info.layer);
    card.setAttribute("data-head", info.head);
    var heading = document.createElement("h4");
    heading.textContent = "block " + info.layer + " head " + info.head + " ";
    if (info.label) {
      var badge = document.createElement("span");
      badge.className = "label";
      badge.style.background = LABEL_COLORS[info.label] || "#444";
      badge.textContent = info.label;
      heading.appendChild(badge);
    }
    card.appendChild(heading);
    if (info.label && Object.keys(info.shares).length) {
      var shareLine = document.createElement("div");
      shareLine.className = "shares";
      shareLine.textContent = "variance shares: " + Object.keys(info.shares).map(function (t) {
        return t + " " + info.shares[t].toFixed(2); }).join(" \u00b7 ");
      card.appendChild(shareLine);
    }
    var row = document.createElement("div");
    row.className = "maps";
    data.panels.forEach(function (panel) {
      var values = slice(panel, info.layer, info.head), scale = 0;
      for (var i = 0; i < values.length; i++) { scale = Math.max(scale, Math.abs(values[i])); }
      var box = document.createElement("div");
      box.className = "map";
      var caption = document.createElement("span");
      caption.textContent = data.titles[panel] + (panel === "pattern" ? "" : " (\u00b1" + scale.toPrecision(3) + ")");
      box.appendChild(caption);
      var canvas = document.createElement("canvas");
      canvas.width = T; canvas.height = T;
      canvas.style.width = (T * cell) + "px"; canvas.style.height = (T * cell) + "px";
      canvas.setAttribute("data-panel", panel);
      var context = canvas.getContext("2d"), image = context.createImageData(T, T);
      for (var k = 0; k < values.length; k++) {
        var rgb = colour(panel, values[k], scale);
        image.data[4 * k] = rgb[0]; image.data[4 * k + 1] = rgb[1]; image.data[4 * k + 2] = rgb[2];
        image.data[4 * k + 3] = 255;
      }
      context.putImageData(image, 0, 0);
      canvas.addEventListener("mousemove", function (event) {
        var rect = canvas.getBoundingClientRect();
        var key = Math.floor((event.clientX - rect.left) / cell), query = Math.floor((event.clientY - rect.top) / cell);
        if (key < 0 || key >= T || query < 0 || query >= T) { return; }
        tip.textContent = "block " + info.layer + " head " + info.head + " " + data.titles[panel] + ": " +
          JSON.stringify(data.tokens[query]) + " (" + query + ") \u2192 " + JSON.stringify(data.tokens[key]) +
          " (" + key + ") = " + values[query * T + key].toPrecision(4);
      });
      box.appendChild(canvas);
      row.appendChild(box);
    });
    card.appendChild(row);
    grid.appendChild(card);
  });
  select.addEventListener("change", function () {
    grid.style.gridTemplateColumns = "repeat(" + H + ", max-content)";
    grid.querySelectorAll(".head").forEach(function (card) {
      card.style.display = select.value === "all" || card.getAttribute("data-layer") === select.value ? "" : "none";
    });
  });
}
"""
