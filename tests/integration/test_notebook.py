"""experiments/explore.ipynb executes top to bottom on a tiny model (DSTG_NOTEBOOK_TINY=1), so it cannot rot."""

import json
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOK = Path(__file__).resolve().parents[2] / "experiments" / "explore.ipynb"


@pytest.mark.timeout(120)
def test_explore_notebook_runs_on_a_tiny_model(tmp_path, monkeypatch):
    # a kernel spec that runs *this* interpreter: the installed one says "python", i.e. whatever is on PATH
    spec = tmp_path / "jupyter" / "kernels" / "dstg-test"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "dstg-interp test", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("DSTG_NOTEBOOK_TINY", "1")
    monkeypatch.setenv("DSTG_CACHE", str(tmp_path / "cache"))  # nothing of the tiny run lands in the real cache
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(notebook, kernel_name="dstg-test", timeout=60,
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()

    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == 2, "the AP manifold and the R² by layer figures are shown inline"
    tables = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert any("hook_embed_ap" in table for table in tables), "the hook table lists DSTG's AP embedding hook"
    assert any("subspace" in table and "ap" in table for table in tables), "the probe table has one column per subspace"
