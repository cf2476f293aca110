"""fig_ap_manifold's layer states: summed during the forward pass by default (no store written), the numbers of the
store route (``--store``, float16 states) to float16 rounding."""

import pandas as pd
import torch

from experiments import fig_ap_manifold

torch.set_num_threads(1)


def test_the_storeless_layer_states_read_the_numbers_of_the_store_route(tmp_path):
    common = ["--tiny", "--quiet", "--model-seeds", "0", "--control-draws", "2", "--projections", "2"]
    stores = tmp_path / "stores"
    fig_ap_manifold.main([*common, "--store-root", str(stores), "--out", str(tmp_path / "a")])
    assert not stores.exists()  # storeless: nothing extracted
    fig_ap_manifold.main([*common, "--store", "--store-root", str(stores), "--out", str(tmp_path / "b")])
    assert stores.is_dir()
    storeless, stored = (pd.read_csv(tmp_path / part / "spectra.csv") for part in ("a", "b"))
    layers = [table[table.source == "layer states"].set_index("name") for table in (storeless, stored)]
    assert len(layers[0]) == len(layers[1]) > 0 and (layers[0].index == layers[1].index).all()
    for column in ("pc1_pc2", "participation_ratio", "low_freq_share", "position_share", "mean_standard_error",
                   "n_tokens", "n_positions"):
        diff = (layers[0][column] - layers[1][column]).abs().max()
        assert diff < 1e-3 * max(1.0, layers[1][column].abs().max()), (column, diff)
    assert (layers[0].sequences == "balanced").all()
    tables = [table[table.source != "layer states"].set_index("name").pc1_pc2 for table in (storeless, stored)]
    pd.testing.assert_series_equal(tables[0], tables[1])  # the learned tables do not depend on the route
