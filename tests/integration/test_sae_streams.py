"""experiments/sae_streams.py end to end on tiny random models: its tables, figure and config; and its refusals
(an unknown stream, a model without the stream asked for: one line, exit 2, nothing written)."""

import json

import pandas as pd
import pytest

from experiments import sae_streams

SMALL = ["--tiny", "--quiet", "--steps", "20", "--ks", "1", "2", "--dict-sizes", "8", "16", "--dict-size", "16",
         "--ref-k", "2", "--min-active", "5"]


def test_sae_streams_writes_its_tables_and_figure(tmp_path):
    out = tmp_path / "sae"
    sae_streams.main([*SMALL, "--variants", "dstg", "rope", "--controls", "dstg", "--out", str(out)])
    fvu = pd.read_csv(out / "fvu.csv")
    streams = set(zip(fvu.model, fvu.control, fvu.stream))
    assert streams == {("dstg", "trained", "sem"), ("dstg", "trained", "ap"), ("dstg", "random init", "sem"),
                       ("dstg", "random init", "ap"), ("rope", "trained", "full")}
    assert len(fvu) == 5 * 3  # k 1, 2 at 16 latents, and 8 latents at k 2
    assert (fvu.fvu < fvu.fvu_mean).all()
    features = pd.read_csv(out / "features.csv")
    assert len(features) == 5 * 16 and features.position_r2.notna().any()
    summary = json.loads((out / "summary.json").read_text())
    assert {row["stream"] for row in summary} == {"sem", "ap", "full"}
    assert all(0 <= row["position_share"] <= 1 for row in summary if row["n_live"])
    for suffix in ("png", "pdf", "json"):
        assert (out / f"sae_streams.{suffix}").is_file()
    config = json.loads((out / "config.json").read_text())
    assert config["script"] == "experiments/sae_streams.py" and "eai-sparsify" in config["versions"]


@pytest.mark.parametrize("flags, message", [
    (["--streams", "semantic"], "unknown stream 'semantic'"),
    (["--variants", "rope", "--streams", "ap"], "model rope has no 'ap' stream"),
])
def test_bad_streams_are_one_line_and_write_nothing(tmp_path, capsys, flags, message):
    out = tmp_path / "sae"
    code = sae_streams.run_as_command(lambda: sae_streams.main([*SMALL, *flags, "--out", str(out)]), "sae_streams")
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message in err[0] and err[0].startswith("sae_streams: error:")
    assert not out.exists()


def test_an_hf_encoder_without_the_stream_is_one_line_and_writes_nothing(tmp_path, capsys):
    """An HF encoder read by the adapter has one state per layer ('full'): asking it for DSTG's AP stream is refused
    before any store is built."""
    from dstg_interp.tiny_zoo import tiny_documents
    from hf_writers import write_tiny_bert

    write_tiny_bert(tmp_path / "bert", tiny_documents(n_docs=8, seed=0))
    capsys.readouterr()  # transformers' "Writing model shards" bar
    out = tmp_path / "sae"
    argv = [*SMALL, "--model", str(tmp_path / "bert"), "--name", "bert", "--streams", "ap", "--out", str(out)]
    code = sae_streams.run_as_command(lambda: sae_streams.main(argv), "sae_streams")
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0] == ("sae_streams: error: model bert has no 'ap' stream (it has full): only DSTG has separate "
                      "sem / ap streams; read full")
    assert not out.exists()
