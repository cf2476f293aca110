"""Hub ids (``--model org/name``) through a Hugging Face cache laid out as huggingface_hub lays it out
(models--ORG--NAME/{blobs, refs/main, snapshots/HASH -> blobs}), offline; the bad cases in one line."""

import httpx
import pytest
import torch
from huggingface_hub import constants
from huggingface_hub.errors import GatedRepoError, LocalEntryNotFoundError

from dstg_interp import EncoderError, open_encoder
from dstg_interp.encoders import HFEncoder, hub
from dstg_interp.cli.entry import launch
from dstg_interp.tiny_zoo import tiny_documents
from hf_writers import COMMIT, cache_repo, write_tiny_bert


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    write_tiny_bert(tmp_path / "src", tiny_documents(n_docs=8, seed=0))
    cache = tmp_path / "hub"
    cache_repo(cache, "org/tiny-bert", tmp_path / "src")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache, tmp_path / "src"


def test_a_hub_id_opens_from_the_cache_offline(hub_cache):
    cache, source = hub_cache
    encoder = open_encoder("org/tiny-bert")
    assert isinstance(encoder, HFEncoder) and encoder.name == "org/tiny-bert"
    assert f"models--org--tiny-bert/snapshots/{COMMIT}" in str(encoder.checkpoint_path)
    tokens = torch.tensor([[2, 7, 8, 3]])
    same = open_encoder(source).states(tokens, layers=[2])[(2, "full")]
    assert torch.equal(encoder.states(tokens, layers=[2])[(2, "full")], same)


def test_hub_ids_through_a_command(hub_cache, tmp_path, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i, document in enumerate(tiny_documents(n_docs=4, seed=2)):
        (corpus / f"{i}.txt").write_text(document.text)
    assert launch("dstg-cache", ["--model", "org/tiny-bert", "--corpus", str(corpus), "--out", str(tmp_path / "s"),
                                 "--max-length", "32", "--quiet"]) == 0
    capsys.readouterr()
    assert launch("dstg-cache", ["--model", "org/not-cached", "--corpus", str(corpus), "--out", str(tmp_path / "t"),
                                 "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not in the Hugging Face cache" in err and "HF_HUB_OFFLINE" in err
    assert not (tmp_path / "t").exists()


def test_remote_code_and_pickles_are_refused(hub_cache, tmp_path):
    cache, source = hub_cache
    custom = tmp_path / "custom"
    custom.mkdir()
    (custom / "config.json").write_text('{"model_type": "my-encoder", "auto_map": {"AutoModel": "modeling.MyModel"}}')
    (custom / "model.safetensors").write_bytes((source / "model.safetensors").read_bytes())
    cache_repo(cache, "org/custom", custom)
    with pytest.raises(EncoderError, match="remote code"):
        open_encoder("org/custom")
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text((source / "config.json").read_text())
    (pickled / "pytorch_model.bin").write_bytes(b"not unpickled")
    cache_repo(cache, "org/pickled", pickled)
    with pytest.raises(EncoderError, match="no safetensors"):
        open_encoder("org/pickled")


def test_a_gated_repository_is_one_line_naming_what_to_do(tmp_path, monkeypatch):
    """With a network (HF_HUB_OFFLINE unset) and no cached copy, a gated repository says to accept its terms
    and log in; nothing is written into the cache folder."""
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)

    def gated(repo_id, local_files_only=False, **kwargs):
        if local_files_only:
            raise LocalEntryNotFoundError(f"{repo_id} is not cached")
        url = f"https://huggingface.co/api/models/{repo_id}"
        raise GatedRepoError(f"Access to model {repo_id} is restricted. You must have access to it.",
                             response=httpx.Response(403, request=httpx.Request("GET", url)))

    monkeypatch.setattr(hub, "snapshot_download", gated)
    with pytest.raises(EncoderError, match=r"org/gated: a gated repository; accept its terms .* \(hf auth login\)") as error:
        open_encoder("org/gated")
    assert "\n" not in str(error.value) and not (tmp_path / "hub").exists()


def test_a_cut_short_safetensors_file_is_one_line(hub_cache, tmp_path, capsys):
    """H5, H6 (round 4): a cut-short model.safetensors in an HF folder or a hub snapshot was a 50-line
    SafetensorError traceback, exit 1."""
    cache, source = hub_cache
    cut = tmp_path / "cut"
    cut.mkdir()
    for file in source.iterdir():
        data = file.read_bytes()
        (cut / file.name).write_bytes(data[: len(data) // 2] if file.name == "model.safetensors" else data)
    cache_repo(cache, "org/cut", cut)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "one.txt").write_text(tiny_documents(n_docs=1, seed=2)[0].text)
    for model in (str(cut), "org/cut"):
        assert launch("dstg-cache", ["--model", model, "--corpus", str(corpus), "--out", str(tmp_path / "s"),
                                     "--quiet"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "safetensors weights are damaged or cut short" in err, err
        assert "Traceback" not in err and not (tmp_path / "s").exists()


def test_a_mistyped_local_path_is_answered_about_the_path_not_the_network(tmp_path, monkeypatch):
    """``runs/nope`` looks like a hub id, but ``runs/`` is a local folder: the line names the folder and its
    close names, and no download is tried; a hub-shaped id under no local folder says to check the path."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "tiny-dstg").mkdir(parents=True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)

    def no_network(repo_id, local_files_only=False, **kwargs):
        if local_files_only:
            raise LocalEntryNotFoundError(f"{repo_id} is not cached")
        raise LocalEntryNotFoundError("ConnectError: [Errno -2] Name or service not known")

    monkeypatch.setattr(hub, "snapshot_download", no_network)
    with pytest.raises(EncoderError, match=r"runs/tiny-dtsg: no such folder: runs/ exists .*did you mean runs/tiny-dstg\?") as error:
        open_encoder("runs/tiny-dtsg")
    assert "network" not in str(error.value) and "\n" not in str(error.value)
    with pytest.raises(EncoderError, match=r"nowhere/model: no such local folder \(check the path\).*cannot be reached"):
        open_encoder("nowhere/model")
