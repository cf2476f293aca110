"""Other authors' checkpoints: every fixture reproduces the authors' own outputs (logits, per-block states of
both streams, final states, score terms, RP bias, attention); dstg-convert round trips; bad input fails in
one line with nothing written.

The fixtures (tests/fixtures/authors-format, README there) are tiny random checkpoints saved in the
authors' exact formats, with the outputs their own forward code gives on two fixed right-padded batches.
"""

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import OBJECTS, PLACES, SUBJECTS, VERBS, tiny_config, tiny_model, write_synthetic_corpus
from dstg_interp import CheckpointError, NoMLMHeadError, load_model
from dstg_interp.cli.convert import main as convert_main
from dstg_interp.model.convert import convert_checkpoint
from your_models import padded_tokenizer
from dstg_interp.model import build_model
from dstg_interp.model.layers import RelativePositionBias
from dstg_interp.cli.probe import main as probe_main

torch.set_num_threads(1)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "authors-format"
POSNEOBERT = ("posneobert-dstg", "posneobert-dstg-encoder", "posneobert-mixedffn-fulldecoding")
BASELINES = ("posneobert-baseline-ap", "posneobert-baseline-rp", "neobert-hf")
FOLDERS = POSNEOBERT + BASELINES
TOLERANCE = 1e-4  # max |ours - theirs| / max |theirs| at real tokens; measured ~1e-6 (float32)


def reference_folder(folder: str) -> str:
    return "posneobert-dstg" if folder == "posneobert-dstg-encoder" else folder  # same weights, no decoder


def batch(input_set: str):
    ids = torch.from_numpy(np.load(FIXTURES / "inputs" / f"input_ids_{input_set}.npy"))
    mask = torch.from_numpy(np.load(FIXTURES / "inputs" / f"attention_mask_{input_set}.npy")).bool()
    return ids, mask


def our_outputs(model, ids, mask) -> dict[str, np.ndarray]:
    """Our hooks, laid out as the authors' output files ([AP | sem] where they concatenate)."""
    cfg = model.config
    dstg = cfg.variant == "dstg"
    with torch.no_grad():
        _, cache = model.run_with_cache(ids, attention_mask=mask)
        out = {} if cfg.encoder_only else {"logits": model(ids, mask)}  # the fused, hook-free path
    layers = range(cfg.n_layers)
    if dstg:
        out["hidden_states"] = torch.stack([torch.cat([cache[f"blocks.{l}.hook_resid_post_ap"],
                                                       cache[f"blocks.{l}.hook_resid_post_sem"]], -1) for l in layers])
        out["final_ap"], out["final_sem"] = cache["hook_final_ap"], cache["hook_final_sem"]
        out["last_hidden_state"] = torch.cat([out["final_ap"], out["final_sem"]], -1)
        for term in ("ap", "sem"):
            out[f"scores_{term}"] = torch.stack([cache[f"blocks.{l}.attn.hook_logits_{term}"] for l in layers])
    else:
        out["hidden_states"] = torch.stack([cache[f"blocks.{l}.hook_resid_post"] for l in layers])
        out["last_hidden_state"] = cache["hook_final"]
    if "blocks.0.attn.hook_logits_rp" in cache:
        out["rp_bias"] = torch.stack([cache[f"blocks.{l}.attn.hook_logits_rp"][0] for l in layers])
    out["attentions"] = torch.stack([cache[f"blocks.{l}.attn.hook_pattern"] for l in layers])
    return {name: value.numpy() for name, value in out.items()}


def real_part(name: str, array: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Where both conventions agree: real tokens (and real query/key pairs); pads follow other rules."""
    if name == "rp_bias":  # [layer, head, q, k]: position-only, defined everywhere
        return array
    if name in ("scores_ap", "scores_sem", "attentions"):  # [layer, batch, head, q, k]
        pairs = mask[:, None, :, None] & mask[:, None, None, :]
        return array[:, np.broadcast_to(pairs, array.shape[1:])]
    if name == "hidden_states":  # [layer, batch, pos, d]
        return array[:, mask]
    return array[mask]  # [batch, pos, d]


def relative_errors(model, folder: str, input_set: str) -> dict[str, float]:
    ids, mask = batch(input_set)
    ours = our_outputs(model, ids, mask)
    errors = {}
    for file in sorted((FIXTURES / reference_folder(folder) / "outputs" / input_set).glob("*.npy")):
        if file.stem == "logits" and model.config.encoder_only:
            continue
        theirs = real_part(file.stem, np.load(file), mask.numpy())
        mine = real_part(file.stem, ours[file.stem], mask.numpy())
        errors[file.stem] = float(np.abs(mine - theirs).max() / np.abs(theirs).max())
    return errors


@pytest.fixture(scope="module")
def tiny_tokenizer():
    """A tokenizer built the toolkit's way over the synthetic grammar's words, padded to just under the fixtures'
    100 embedding rows."""
    return padded_tokenizer({w for phrase in SUBJECTS + VERBS + OBJECTS + PLACES for w in phrase.lower().split()})


@pytest.mark.parametrize("input_set", ["a", "b"])
@pytest.mark.parametrize("folder", FOLDERS)
def test_fixture_reproduces_the_authors_outputs(folder, input_set):
    model = load_model(FIXTURES / folder)
    errors = relative_errors(model, folder, input_set)
    expected = {"hidden_states", "last_hidden_state", "attentions"}
    if folder in POSNEOBERT:
        expected |= {"final_ap", "final_sem", "scores_ap", "scores_sem"}
    if folder != "posneobert-dstg-encoder":
        expected.add("logits")
    if folder == "neobert-hf":  # its reference has no attention weights
        expected.discard("attentions")
    assert expected <= set(errors)
    bad = {name: error for name, error in errors.items() if not error <= TOLERANCE}
    assert not bad, f"{folder}/{input_set}: relative error above {TOLERANCE}: {bad}"


@pytest.mark.parametrize("folder, fmt, variant, options", [
    ("posneobert-dstg", "posneobert", "dstg", dict(rp_zero_boundary=True, mlp_mode="split", mlm_head_input="sem",
                                                   encoder_only=False, residual_from_normed=True, mlp_ap_units=40)),
    ("posneobert-dstg-encoder", "posneobert", "dstg", dict(encoder_only=True, rp_zero_boundary=True)),
    ("posneobert-mixedffn-fulldecoding", "posneobert", "dstg", dict(mlp_mode="mixed", mlm_head_input="full",
                                                                    rp_zero_boundary=False, d_mlp=216)),
    ("posneobert-baseline-ap", "neobert-baseline", "ap", dict(max_positions=32, d_mlp=176)),
    ("posneobert-baseline-rp", "neobert-baseline", "rp", dict(rp_zero_boundary=True)),
    ("neobert-hf", "neobert", "rope", dict(norm_eps=1e-5, d_head=16)),
])
def test_format_detection_and_options(folder, fmt, variant, options):
    config = load_model(FIXTURES / folder).config
    assert (config.source["format"], config.variant) == (fmt, variant)
    assert {name: getattr(config, name) for name in options} == options


def test_each_convention_matters():
    """The fixture is sensitive to the mapping: undoing the RP zeroing or the normed residual breaks it."""
    model = load_model(FIXTURES / "posneobert-dstg")
    ids, mask = batch("b")
    reference = np.load(FIXTURES / "posneobert-dstg" / "outputs" / "b" / "logits.npy")[mask.numpy()]
    for change in (dict(rp_zero_boundary=False), dict(residual_from_normed=False)):
        other = build_model(type(model.config).from_dict({**model.config.to_dict(), **change}))
        other.load_state_dict(model.state_dict())
        with torch.no_grad():
            logits = other.eval()(ids, mask).numpy()[mask.numpy()]
        assert np.abs(logits - reference).max() > 0.1, change


def test_encoder_only_has_states_but_no_logits():
    model = load_model(FIXTURES / "posneobert-dstg-encoder")
    ids, mask = batch("b")
    assert model.mlm_head is None and "mlm_head.weight" not in model.state_dict()
    with pytest.raises(NoMLMHeadError, match="encoder-only.*no MLM head"):
        model(ids, mask).logits
    with pytest.raises(NoMLMHeadError, match="encoder-only"):
        model(ids, mask, labels=ids)
    assert getattr(model(ids, mask), "logits", None) is None  # an AttributeError too: hasattr sees no logits
    assert model(ids, mask, stop_at_layer=1).logits is None
    _, cache = model.run_with_cache(ids, attention_mask=mask, names_filter=lambda n: n.startswith("hook_final"))
    assert cache["hook_final_ap"].shape == (2, 13, 16) and cache["hook_final_sem"].shape == (2, 13, 64)


def copy_fixture(folder: str, to: Path) -> Path:
    shutil.copytree(FIXTURES / folder, to, ignore=shutil.ignore_patterns("outputs"))
    return to


def interleave_qk(qkv: torch.Tensor, n_heads: int, width: int):
    """The training code's layout from the fork's: per-head [q_h | k_h] rows, and v apart."""
    d_qk = (qkv.shape[0] - width) // 2
    q, k, v = qkv.split([d_qk, d_qk, width])
    qk = torch.stack([q.view(n_heads, -1, qkv.shape[1]), k.view(n_heads, -1, qkv.shape[1])], dim=1)
    return qk.reshape(2 * d_qk, qkv.shape[1]), v


def training_code_copy(folder: str, to, file_name="model.safetensors"):
    """A fixture re-saved in the training code's (A2) attention layout."""
    copy_fixture(folder, to)
    state = load_file(str(to / "model.safetensors"))
    for key in [k for k in state if ".qkv_" in k]:
        stream = key.split(".qkv_")[1].split(".")[0]
        width = 16 if stream == "pos" else 64
        state[key.replace(f"qkv_{stream}", f"qk_{stream}")], state[key.replace(f"qkv_{stream}", f"v_{stream}")] = \
            interleave_qk(state.pop(key), 4, width)
    (to / "model.safetensors").unlink()
    if file_name.endswith(".safetensors"):
        save_file(state, str(to / file_name))
    else:
        torch.save(state, to / file_name)
    return to


def test_training_code_layout_without_rp_reproduces_the_authors(tmp_path):
    model = load_model(training_code_copy("posneobert-mixedffn-fulldecoding", tmp_path / "a2"))
    assert model.config.source["format"] == "posneobert-training"
    for input_set in "ab":
        assert max(relative_errors(model, "posneobert-mixedffn-fulldecoding", input_set).values()) <= TOLERANCE


def test_training_code_layout_with_rp_does_not_zero_the_bias(tmp_path):
    """A2 (their training code) never zeroed the RP boundary; the same weights in the fork's file do."""
    a2 = load_model(training_code_copy("posneobert-dstg", tmp_path / "a2", file_name="state_dict.pt"))
    fork = load_model(FIXTURES / "posneobert-dstg")
    assert a2.config.source["files"] == ["state_dict.pt"] and not a2.config.rp_zero_boundary
    twin = build_model(type(fork.config).from_dict({**fork.config.to_dict(), "rp_zero_boundary": False}))
    twin.load_state_dict(fork.state_dict())
    ids, mask = batch("a")
    with torch.no_grad():
        torch.testing.assert_close(a2(ids, mask), twin.eval()(ids, mask), rtol=0, atol=1e-5)


def test_pytorch_bin_is_read_weights_only(tmp_path):
    folder = copy_fixture("neobert-hf", tmp_path / "bin")
    torch.save(load_file(str(folder / "model.safetensors")), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    model = load_model(folder)
    assert model.config.source["files"] == ["pytorch_model.bin"]
    assert max(relative_errors(model, "neobert-hf", "a").values()) <= TOLERANCE


def test_sharded_safetensors(tmp_path):
    folder = copy_fixture("posneobert-baseline-ap", tmp_path / "sharded")
    state = load_file(str(folder / "model.safetensors"))
    (folder / "model.safetensors").unlink()
    keys = sorted(state)
    shards = {"model-00001-of-00002.safetensors": keys[::2], "model-00002-of-00002.safetensors": keys[1::2]}
    for name, shard_keys in shards.items():
        save_file({key: state[key] for key in shard_keys}, str(folder / name))
    weight_map = {key: name for name, shard_keys in shards.items() for key in shard_keys}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    model = load_model(folder)
    assert model.config.source["files"] == sorted(shards)
    assert max(relative_errors(model, "posneobert-baseline-ap", "b").values()) <= TOLERANCE


def test_separate_ffns_become_a_block_diagonal_split_ffn(tmp_path):
    """mixed_feed_forward=false: one SwiGLU per stream, expressed as our split FFN (no reference outputs:
    checked against the two SwiGLUs computed by hand)."""
    folder = copy_fixture("posneobert-mixedffn-fulldecoding", tmp_path / "separate")
    data = json.loads((folder / "config.json").read_text())
    data["mixed_feed_forward"] = False
    (folder / "config.json").write_text(json.dumps(data))
    state = load_file(str(folder / "model.safetensors"))
    generator = torch.Generator().manual_seed(0)
    widths = {"pos": (16, 48), "sem": (64, 176)}  # (stream width, multiple_of_8_up(2/3 * intermediate))
    for layer in range(2):
        t = f"model.transformer_encoder.{layer}."
        del state[t + "ffn.w12.weight"], state[t + "ffn.w3.weight"]
        for name, (width, hidden) in widths.items():
            state[t + f"{name}_ffn.w12.weight"] = torch.randn(2 * hidden, width, generator=generator) / width ** 0.5
            state[t + f"{name}_ffn.w3.weight"] = torch.randn(width, hidden, generator=generator) / hidden ** 0.5
    save_file(state, str(folder / "model.safetensors"))
    model = load_model(folder)
    assert (model.config.mlp_mode, model.config.d_mlp, model.config.mlp_ap_units) == ("split", 224, 48)
    ids, mask = batch("b")
    _, cache = model.run_with_cache(ids, attention_mask=mask)
    block = model.blocks[1]
    for name, ours in (("pos", "ap"), ("sem", "sem")):
        normed = getattr(block, f"norm_mlp_{ours}")(cache[f"blocks.1.hook_resid_mid_{ours}"])
        gate, value = torch.nn.functional.linear(normed, state[f"model.transformer_encoder.1.{name}_ffn.w12.weight"]).chunk(2, -1)
        expected = torch.nn.functional.silu(gate) * value @ state[f"model.transformer_encoder.1.{name}_ffn.w3.weight"].T
        torch.testing.assert_close(cache[f"blocks.1.hook_mlp_out_{ours}"], expected, rtol=1e-5, atol=1e-5)


# --- dstg-convert -------------------------------------------------------------------------------------

@pytest.mark.parametrize("folder", FOLDERS)
def test_convert_then_load_gives_the_same_outputs(folder, tmp_path, tiny_tokenizer):
    tokenizer_file = tmp_path / "tokenizer.json"
    tiny_tokenizer.save(str(tokenizer_file))
    out = tmp_path / "converted"
    assert convert_main([str(FIXTURES / folder), str(out), "--tokenizer", str(tokenizer_file)]) == 0
    config = json.loads((out / "config.json").read_text())
    manifest = json.loads((FIXTURES / "manifest.json").read_text())["variants"].get(folder)
    assert config["source"]["path"] == str((FIXTURES / folder).resolve()) and "variant" in config
    if manifest is not None:
        assert config["source"]["sha256"] == manifest["sha256"]["model.safetensors"]
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]
    converted = load_model(out)
    assert converted.tokenizer.get_vocab_size() == tiny_tokenizer.get_vocab_size()
    for input_set in "ab":
        errors = relative_errors(converted, folder, input_set)
        assert max(errors.values()) <= TOLERANCE, errors


def test_convert_refuses_to_overwrite(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    for extra in ([], ["--overwrite"]):  # a folder with a user's file is never replaced (N18)
        code = convert_main([str(FIXTURES / "neobert-hf"), str(out), "--no-tokenizer", *extra])
        assert code == 2 and "never replaced" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


# --- bad input: one CheckpointError from the API, exit 2 + one line from dstg-convert, nothing written --

def unknown_architecture(tmp_path):
    folder = copy_fixture("neobert-hf", tmp_path / "src")
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}))
    return folder


def contradicting_config(tmp_path):
    folder = copy_fixture("posneobert-dstg", tmp_path / "src")
    data = json.loads((folder / "config.json").read_text())
    data["pos_size"] = 32  # the weights have 16
    data["dim_head"] = 24
    (folder / "config.json").write_text(json.dumps(data))
    return folder


class NotATensor:
    pass


def pickle_only(tmp_path):
    folder = copy_fixture("neobert-hf", tmp_path / "src")
    state = load_file(str(folder / "model.safetensors"))
    state["extra"] = NotATensor()
    torch.save(state, folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    return folder


def truncated_safetensors(tmp_path):
    folder = copy_fixture("posneobert-baseline-rp", tmp_path / "src")
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    return folder


def fused_qk(tmp_path):
    folder = copy_fixture("posneobert-dstg", tmp_path / "src")
    state = load_file(str(folder / "model.safetensors"))
    for layer in range(2):
        t = f"model.transformer_encoder.{layer}."
        del state[t + "qkv_pos.weight"], state[t + "qkv_sem.weight"]
        state[t + "qk.weight"] = torch.zeros(160, 80)
    save_file(state, str(folder / "model.safetensors"))
    return folder


def gelu_ffn(tmp_path):
    folder = copy_fixture("posneobert-dstg", tmp_path / "src")
    data = json.loads((folder / "config.json").read_text())
    data["hidden_act"] = "gelu"
    (folder / "config.json").write_text(json.dumps(data))
    return folder


BAD_INPUTS = {
    "unknown architecture": (unknown_architecture, "unknown architecture"),
    "config contradicts weights": (contradicting_config, "has shape (33, 16) but config.json implies (33, 32)"),
    "pickle only": (pickle_only, "weights_only"),
    "truncated safetensors": (truncated_safetensors, "corrupt safetensors"),
    "fused qk (A1)": (fused_qk, "fused 'qk' projection"),
    "gelu FFN": (gelu_ffn, "hidden_act='gelu' is not supported"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input(case, tmp_path, capsys):
    make, needle = BAD_INPUTS[case]
    source = make(tmp_path)
    with pytest.raises(CheckpointError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        load_model(source)
    out = tmp_path / "out"
    assert convert_main([str(source), str(out), "--no-tokenizer"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dstg-convert: error:") and err.count("\n") == 1 and needle in err
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["src"]


def test_missing_tokenizer_is_explained(tmp_path, capsys):
    out = tmp_path / "out"
    with pytest.raises(CheckpointError, match="no tokenizer .*--tokenizer"):
        convert_checkpoint(FIXTURES / "posneobert-dstg-encoder", out)
    assert convert_main([str(FIXTURES / "posneobert-dstg-encoder"), str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tokenizer.json" in err and "--tokenizer" in err
    assert not out.exists()


# --- the encoder-only layout probes with dstg-probe ---------------------------------------------------

@pytest.fixture
def probe_setup(tmp_path, monkeypatch, tiny_tokenizer):
    monkeypatch.setenv("DSTG_CACHE", str(tmp_path / "cache"))
    corpus = write_synthetic_corpus(tmp_path / "corpus", n_docs=12)
    tokenizer_file = tmp_path / "tokenizer.json"
    tiny_tokenizer.save(str(tokenizer_file))
    return corpus, tokenizer_file


def test_converted_encoder_only_model_probes_by_segment(probe_setup, tmp_path, capsys):
    corpus, tokenizer_file = probe_setup
    converted = tmp_path / "posbert"
    assert convert_main([str(FIXTURES / "posneobert-dstg-encoder"), str(converted), "--tokenizer", str(tokenizer_file)]) == 0
    out = tmp_path / "results"
    code = probe_main(["--model", str(converted), "--task", "segment", "--corpus", str(corpus), "--out", str(out),
                       "--no-controls", "--quiet"])
    assert code == 0, capsys.readouterr().err
    results = pd.read_csv(out / "results.csv")
    assert set(results.subspace) == {"ap", "sem", "full"} and sorted(set(results.layer)) == [0, 1, 2]
    assert results.r2.notna().all()


def test_authors_folder_probes_directly_and_needs_a_tokenizer(probe_setup, tmp_path, capsys):
    corpus, tokenizer_file = probe_setup
    folder = copy_fixture("posneobert-dstg-encoder", tmp_path / "posbert")
    args = ["--model", str(folder), "--task", "token", "--corpus", str(corpus), "--no-controls", "--quiet"]
    assert probe_main(args + ["--out", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no tokenizer" in err and not (tmp_path / "none").exists()
    shutil.copy(tokenizer_file, folder / "tokenizer.json")  # beside the weights, as the error says
    assert probe_main(args + ["--out", str(tmp_path / "token")]) == 0, capsys.readouterr().err
    results = pd.read_csv(tmp_path / "token" / "results.csv")
    assert set(results.subspace) == {"ap", "sem", "full"}


# --- the ModelConfig options the formats need: validated, defaults unchanged ---------------------------

def test_new_options_default_to_todays_behaviour():
    config = tiny_config("dstg")
    assert (config.rp_zero_boundary, config.mlp_mode, config.mlp_ap_units, config.mlm_head_input, config.encoder_only,
            config.source) == (False, "split", None, "sem", False, None)
    assert config.d_mlp_ap == max(8, 8 * int(config.d_mlp * config.d_ap / config.d_model // 8))
    old = {k: v for k, v in config.to_dict().items()
           if k not in ("rp_zero_boundary", "mlp_mode", "mlp_ap_units", "mlm_head_input", "encoder_only", "source")}
    assert type(config).from_dict(old) == config == type(config).from_json(config.to_json())
    assert tiny_config("rope").mlm_head_input == "full"


@pytest.mark.parametrize("variant, overrides, needle", [
    ("rope", dict(rp_zero_boundary=True), "has no relative bias"),
    ("ap", dict(mlp_mode="mixed"), "only exists for variant 'dstg'"),
    ("dstg", dict(mlp_mode="gated"), "expected 'split' or 'mixed'"),
    ("dstg", dict(d_mlp=64, mlp_ap_units=64), "must be an integer in"),
    ("dstg", dict(mlp_mode="mixed", mlp_ap_units=8), "only the 'split' FFN"),
    ("rp", dict(mlm_head_input="sem"), "allows 'full'"),
    ("dstg", dict(mlm_head_input="ap"), "allows 'sem' or 'full'"),
    ("dstg", dict(encoder_only="yes"), "must be true or false"),
    ("dstg", dict(source="somewhere"), "expected a JSON object"),
])
def test_invalid_options(variant, overrides, needle):
    with pytest.raises(ValueError, match=needle):
        tiny_config(variant, **overrides)


def test_rp_zero_boundary_zeroes_the_edges_of_the_padded_length():
    plain, zeroed = (RelativePositionBias(4, 32, 128, 40, zero_boundary=z) for z in (False, True))
    with torch.no_grad():
        plain.bias.normal_()
    zeroed.load_state_dict(plain.state_dict())
    a, b = plain(13)[0], zeroed(13)[0]
    assert b[:, [0, -1], :].abs().sum() == 0 and b[:, :, [0, -1]].abs().sum() == 0
    torch.testing.assert_close(a[:, 1:-1, 1:-1], b[:, 1:-1, 1:-1], rtol=0, atol=0)
    assert a[:, 1:-1, -1].abs().sum() > 0


def test_options_round_trip_and_shape_the_model(tmp_path, padded_batch):
    tokens, mask = padded_batch
    full_head = tiny_model("dstg", mlp_mode="mixed", mlm_head_input="full", rp_zero_boundary=True)
    assert full_head.mlm_head.weight.shape == (97, 32) and full_head.blocks[0].mlp.w_out.weight.shape == (32, full_head.config.d_mlp)
    before = full_head(tokens, mask)
    with torch.no_grad():
        full_head.final_norm_ap.weight.mul_(2)  # the head reads the AP stream too
    assert not torch.allclose(before, full_head(tokens, mask))
    full_head.save(tmp_path / "mixed")
    reloaded = load_model(tmp_path / "mixed")
    assert reloaded.config == full_head.config
    torch.testing.assert_close(reloaded(tokens, mask), full_head.eval()(tokens, mask), rtol=0, atol=0)
    explicit = tiny_model("dstg", mlp_ap_units=16)
    assert explicit.blocks[0].mlp.w_out_ap.weight.shape == (8, 16)
    assert explicit.blocks[0].mlp.w_out_sem.weight.shape == (24, explicit.config.d_mlp - 16)
    encoder = tiny_model("rope", encoder_only=True)
    encoder.save(tmp_path / "encoder")
    assert load_model(tmp_path / "encoder").mlm_head is None
