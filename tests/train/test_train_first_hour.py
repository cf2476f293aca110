"""Small things a researcher meets in the first hour: a short run's warm-up."""

import pytest

from dstg_interp.train import TrainConfig


def test_default_warmup_scales_with_steps():
    assert TrainConfig(max_steps=40).warmup_steps == 4  # was 200, so --steps 40 was refused
    assert TrainConfig(max_steps=4800).warmup_steps == 200 and TrainConfig(max_steps=40, warmup_steps=0).warmup_steps == 0
    with pytest.raises(ValueError, match="warmup_steps"):
        TrainConfig(max_steps=40, warmup_steps=40)
