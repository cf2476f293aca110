"""Models are named by something a reader recognises (dstg_interp.encoders.naming).

Case numbers are those of the hostile-input rounds; docs/RELIABILITY.md maps each case group to its test.
The other rooms' cases are in their own folders' test_*_bad_input.py.
"""

import json

from dstg_interp.encoders.naming import model_label


# --- 6. statistics that mislead -------------------------------------------------------------------
def test_models_are_named_by_something_a_reader_recognises(tmp_path):
    """An HF folder named 'model' was labelled 'model' in the table; all-MiniLM-L6-v2 was labelled by the
    base checkpoint its config's _name_or_path records.  The rule (dstg_interp.encoders.naming): the model
    card's title, else the folder's own name (a generic one with its parent's)."""
    hf = tmp_path / "runs" / "model"
    hf.mkdir(parents=True)
    (hf / "config.json").write_text(json.dumps({"model_type": "bert", "_name_or_path": "nreimers/MiniLM-L6-H384-uncased"}))
    assert model_label(str(hf)) == "runs/model"
    (hf / "README.md").write_text("---\nlibrary_name: sentence-transformers\n---\n\n# all-MiniLM-L6-v2\nThis is a model.\n")
    assert model_label(str(hf)) == "all-MiniLM-L6-v2"
    snapshot = tmp_path / "hub" / "models--org--tiny-encoder" / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    assert model_label(str(snapshot)) == "org/tiny-encoder"
    ours = tmp_path / "runs" / "mine" / "checkpoint"
    ours.mkdir(parents=True)
    (ours / "config.json").write_text("{}")
    assert model_label(str(ours)) == "mine" and model_label("dstg") == "dstg"
