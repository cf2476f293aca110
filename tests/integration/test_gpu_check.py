"""benchmarks/gpu_check.py --dry-run: every section of the GPU check runs on the CPU at tiny sizes, so a GPU
machine's few minutes are never spent finding a broken script."""

import json
import subprocess
import sys
from pathlib import Path

import torch

from dstg_interp.tiny_zoo import TINY_WIDTHS

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.py"


def test_the_gpu_check_dry_run_fills_every_section(tmp_path):
    out = tmp_path / "gpu_check.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--out", str(out)], capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    sections = result["sections"]
    assert list(sections) == ["peak", "loss", "extraction", "probes", "storeless", "training", "torchrun"]
    assert not [name for name, s in sections.items() if "error" in s or "skipped" in s], sections
    assert result["dry_run"] and len(result["load_before"]) == 3 and "load_after" in result["machine"]
    assert sections["peak"]["bf16_flops"] > 0 and sections["peak"]["fp32_flops"] > 0
    training = sections["training"]
    assert set(training["variants"]) == set(TINY_WIDTHS)  # the zoo's variants, the NoPE floor among them
    # MFU against the measured bf16 peak is below 1 where bfloat16 is native; on a CPU that emulates it (AVX2)
    # the "peak" matmul is emulated too while much of a tiny training step stays in float32, so it can exceed 1
    native_bf16 = torch.ops.mkldnn._is_mkldnn_bf16_supported()
    for row in training["variants"].values():
        assert row["eager_tokens_per_s"] > 0 and row["eager_mfu_bf16"] > 0 and row["eager_vs_hf"] > 0
        assert row["eager_mfu_bf16"] < 1 or not native_bf16, row
    for curves in sections["loss"]["variants"].values():
        assert len(curves["fp32"]) == len(curves["bf16"]) == sections["loss"]["steps"]
        assert curves["max_rel_diff"] < 0.05  # bf16 autocast follows the fp32 losses over the first steps
    assert sections["extraction"]["extract_tokens_per_s"] > 0 and sections["extraction"]["n_tokens"] == 2048
    probes = sections["probes"]
    assert probes["same_alphas"] and probes["max_abs_delta_test_r2"] < 1e-10
    storeless = sections["storeless"]  # the default route of dstg-probe: the store route's table, no store
    assert storeless["storeless_tokens_per_s"] > 0 and storeless["n_tokens"] == 2048 and storeless["same_nan_cells"]
    assert storeless["max_abs_delta_vs_store_route"] < 1e-6  # the held-out pass batches differently: float noise
    assert storeless["float32_grams"]["storeless_vs_plain"] > 0
    assert storeless["float32_grams"]["max_abs_delta_vs_float64"] < 1e-4  # float32 Gram products: their own tolerance
    torchrun = sections["torchrun"]
    assert torchrun["train_returncode"] == 0 and torchrun["cache_returncode"] == 0, torchrun
    assert torchrun["train_tokens_per_s_steady"] > 0 and torchrun["cache_n_tokens"] > 0


def test_a_failing_measurement_is_recorded_and_the_rest_kept(tmp_path):
    import importlib.util

    sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    row = {}
    gpu_check.attempt(row, "compiled_tokens_per_s", lambda: 1 / 0)
    gpu_check.attempt(row, "eager_tokens_per_s", lambda: 5.0)
    assert row == {"compiled_tokens_per_s_error": "ZeroDivisionError: division by zero", "eager_tokens_per_s": 5.0}
    assert gpu_check.main(["--dry-run", "--sections", "peak", "--budget", "0", "--out", str(tmp_path / "r.json")]) == 0
    assert "skipped" in json.loads((tmp_path / "r.json").read_text())["sections"]["peak"]
