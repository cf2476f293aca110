"""Probe statistics that would mislead: intervals on few held-out documents are undefined, with a warning.

Case numbers are those of the hostile-input rounds; docs/RELIABILITY.md maps each case group to its test.
The other rooms' cases are in their own folders' test_*_bad_input.py.
"""

import warnings

import pytest

from conftest import write_synthetic_corpus
from dstg_interp.cli.probe import compact_table
from probes.positions import SmallSampleWarning, probe_positions


# --- 6. statistics that mislead -------------------------------------------------------------------
def test_intervals_on_few_documents_are_undefined(tiny, tmp_path):
    """7 documents printed '± 0.000' everywhere: under 10 held-out documents the interval is NaN, with a warning."""
    checkpoint, corpus = tiny
    with pytest.warns(SmallSampleWarning, match=r"only 2 held-out document\(s\).*needs 10"):
        table = probe_positions(str(checkpoint), task="token", corpus=str(corpus), layers=[0], subspaces=["ap"],
                                controls=False, n_boot=50, store_root=tmp_path / "stores", progress=False)
    assert table.ci_low.isna().all() and table.ci_high.isna().all() and (table.n_test_docs == 2).all()
    assert "± n/a" in compact_table(table)
    many = write_synthetic_corpus(tmp_path / "many", n_docs=50)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SmallSampleWarning)
        table = probe_positions(str(checkpoint), task="token", corpus=str(many), layers=[0], subspaces=["ap"],
                                controls=False, n_boot=50, store_root=tmp_path / "stores", progress=False)
    assert table.ci_low.notna().all() and (table.n_test_docs == 10).all()
