"""Nothing lost: a checkpoint caught between two renames is put back by the next --resume.

Case numbers are those of the hostile-input rounds; docs/RELIABILITY.md maps every case group to the test
that covers it. The other rooms' cases are in their own folders' test_*_output_safety.py.
"""

import json

import torch

from dstg_interp import io as dio
from dstg_interp.train import read_resume_state

torch.set_num_threads(1)


# --- 2. half-done work is never taken for complete -------------------------------------------------
def test_a_checkpoint_caught_between_two_renames_is_put_back(tmp_path):
    """#133 where no atomic swap exists: the next --resume restores '.checkpoint.old-HOST-PID'."""
    from dstg_interp.train import TrainConfig

    cfg = TrainConfig(out_dir=str(tmp_path / "run"), model=dict(variant="dstg", d_sem=24, d_ap=8, n_layers=1, n_heads=4),
                      vocab_size=200, max_length=32, max_steps=4, warmup_steps=1)
    (tmp_path / "run").mkdir()
    dead_pid = 2**22 + 12345  # above the default pid_max: never a live process
    old = tmp_path / "run" / f".checkpoint.old-{dio._HOST}-{dead_pid}"
    old.mkdir()
    (old / "train_state.json").write_text(json.dumps({"step": 2, "tokens_seen": 1, "train_seconds": 0.1}))
    (old / "train_config.json").write_text(json.dumps(cfg.to_dict()))
    from safetensors.torch import save_file

    save_file({"0.step": torch.tensor(2.0)}, str(old / "optimizer.safetensors"))
    state, checkpoint = read_resume_state(cfg)
    assert state["step"] == 2 and checkpoint.is_dir() and not old.exists()
