"""Model FLOPs of an MLM training step, for model-FLOPs utilisation (benchmarks/bench_training.py).

    from dstg_interp.flops import training_flops_per_token
    mfu = tokens_per_s * training_flops_per_token(cfg, seq_len=128) / peak_flops_per_s

Counted as in the PaLM/nanoGPT convention: 2 FLOPs per multiply-add, training = 3x forward (forward +
backward for activations and weights), attention scores and weighted sums included, the MLM head only
on the masked fraction of tokens (what ``masked_logits_only`` computes), norms and softmax ignored.
"""

from __future__ import annotations

from .config import ModelConfig


def forward_flops_per_token(cfg: ModelConfig, seq_len: int, masked_fraction: float = 0.2) -> float:
    hd = cfg.n_heads * cfg.d_head
    if cfg.spec.ap_stream:
        projections = 2 * cfg.d_sem * (2 * hd + cfg.d_sem) + 2 * cfg.d_ap * (2 * hd + cfg.d_ap)
        outputs = 2 * cfg.d_sem**2 + 2 * cfg.d_ap**2
        attention = 2 * seq_len * 2 * hd + 2 * seq_len * (cfg.d_sem + cfg.d_ap)  # [q_sem|q_ap].[k_sem|k_ap], p @ [v_sem|v_ap]
        if cfg.mlp_mode == "mixed":  # every hidden unit writes both streams
            down = 2 * cfg.d_mlp * cfg.d_model
        else:
            down = 2 * (cfg.d_mlp_sem * cfg.d_sem + cfg.d_mlp_ap * cfg.d_ap)
        mlp = 2 * cfg.d_model * 2 * cfg.d_mlp + down
        head = 2 * (cfg.d_sem if cfg.mlm_head_input == "sem" else cfg.d_model) * cfg.vocab_size
    else:
        projections = 2 * cfg.d_model * 3 * hd
        outputs = 2 * hd * cfg.d_model
        attention = 2 * seq_len * hd * 2
        mlp = 2 * cfg.d_model * 2 * cfg.d_mlp + 2 * cfg.d_mlp * cfg.d_model
        head = 2 * cfg.d_model * cfg.vocab_size
    return cfg.n_layers * (projections + outputs + attention + mlp) + masked_fraction * head


def training_flops_per_token(cfg: ModelConfig, seq_len: int, masked_fraction: float = 0.2) -> float:
    return 3 * forward_flops_per_token(cfg, seq_len, masked_fraction)
