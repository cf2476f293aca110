"""Model behaviour: forward/backward with padding, hooks, fused-vs-reference attention, stream separation."""

import math

import pytest
import torch
import torch.nn.functional as F

from dstg_interp import ModelConfig, build_model
from dstg_interp.model.layers import additive_key_mask, fused_attention, t5_relative_buckets

from conftest import VARIANTS, tiny_config, tiny_model


def labels_at(tokens, start: int, stop: int):
    """MLM labels for positions start..stop-1 of every row (-100 elsewhere)."""
    labels = torch.full_like(tokens, -100)
    labels[:, start:stop] = tokens[:, start:stop]
    return labels


def test_forward_backward_with_padding(variant, padded_batch):
    model = tiny_model(variant)
    tokens, mask = padded_batch
    out = model(tokens, mask, labels=labels_at(tokens, 3, 6))
    assert out.logits.shape == (2, 16, 97)
    assert torch.isfinite(out.loss)
    out.loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)


def test_padding_does_not_change_real_tokens(variant, padded_batch):
    model = tiny_model(variant).eval()
    tokens, mask = padded_batch
    full = model(tokens, mask)[1, :11]
    alone = model(tokens[1:, :11])[0]
    torch.testing.assert_close(full, alone, atol=1e-5, rtol=1e-5)


def test_masked_logits_only_gives_same_loss(variant, padded_batch):
    model = tiny_model(variant)
    tokens, mask = padded_batch
    labels = labels_at(tokens, 2, 5)
    full = model(tokens, mask, labels=labels)
    masked = model(tokens, mask, labels=labels, masked_logits_only=True)
    assert masked.logits.shape == (6, 97)
    torch.testing.assert_close(full.loss, masked.loss)


def test_masked_rows_padded_to_a_multiple_give_the_same_loss_logits_and_gradients(variant, padded_batch):
    """6 masked rows padded to 16 (zero rows, targets the loss ignores): what training under bf16 runs."""
    tokens, mask = padded_batch
    labels = labels_at(tokens, 2, 5)
    runs = []
    for multiple in (1, 16):
        model = tiny_model(variant)
        out = model(tokens, mask, labels=labels, masked_logits_only=True, masked_rows_multiple=multiple)
        out.loss.backward()
        runs.append((out, {name: p.grad for name, p in model.named_parameters() if p.grad is not None}))
    (plain, plain_grads), (padded, padded_grads) = runs
    assert padded.logits.shape == plain.logits.shape == (6, 97)
    torch.testing.assert_close(padded.logits, plain.logits)
    torch.testing.assert_close(padded.loss, plain.loss)
    assert padded_grads.keys() == plain_grads.keys()
    for name in plain_grads:
        torch.testing.assert_close(padded_grads[name], plain_grads[name], msg=name)


@pytest.mark.parametrize("multiple", [0, -4, 2.0, True])
def test_masked_rows_multiple_must_be_a_positive_integer(multiple, padded_batch):
    tokens, mask = padded_batch
    with pytest.raises(ValueError, match="masked_rows_multiple must be a positive integer"):
        tiny_model("dstg")(tokens, mask, labels=labels_at(tokens, 2, 5), masked_logits_only=True, masked_rows_multiple=multiple)


def test_seeded_build_is_reproducible(variant):
    a, b = tiny_model(variant), tiny_model(variant)
    c = tiny_model(variant, seed=1)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert not all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), c.state_dict().values()))


EXPECTED_HOOKS = {
    "dstg": {
        "hook_embed_sem": (2, 16, 24),
        "hook_embed_ap": (2, 16, 8),
        "blocks.1.hook_resid_pre_sem": (2, 16, 24),
        "blocks.1.hook_resid_pre_ap": (2, 16, 8),
        "blocks.1.hook_resid_post_sem": (2, 16, 24),
        "blocks.1.hook_resid_post_ap": (2, 16, 8),
        "blocks.0.attn.hook_logits_sem": (2, 4, 16, 16),
        "blocks.0.attn.hook_logits_ap": (2, 4, 16, 16),
        "blocks.0.attn.hook_logits_rp": (2, 4, 16, 16),
        "blocks.0.attn.hook_pattern": (2, 4, 16, 16),
        "hook_final_sem": (2, 16, 24),
        "hook_final_ap": (2, 16, 8),
    },
    "rope": {"hook_embed": (2, 16, 32), "blocks.1.hook_resid_pre": (2, 16, 32), "blocks.1.hook_resid_post": (2, 16, 32),
             "blocks.0.attn.hook_logits": (2, 4, 16, 16), "blocks.0.attn.hook_pattern": (2, 4, 16, 16), "hook_final": (2, 16, 32)},
    "ap": {"hook_embed": (2, 16, 32), "hook_pos_embed": (2, 16, 32), "blocks.1.hook_resid_post": (2, 16, 32),
           "blocks.0.attn.hook_logits": (2, 4, 16, 16), "blocks.0.attn.hook_pattern": (2, 4, 16, 16), "hook_final": (2, 16, 32)},
    "rp": {"hook_embed": (2, 16, 32), "blocks.1.hook_resid_post": (2, 16, 32), "blocks.0.attn.hook_logits": (2, 4, 16, 16),
           "blocks.0.attn.hook_logits_rp": (2, 4, 16, 16), "blocks.0.attn.hook_pattern": (2, 4, 16, 16), "hook_final": (2, 16, 32)},
    "nope": {"hook_embed": (2, 16, 32), "blocks.1.hook_resid_pre": (2, 16, 32), "blocks.1.hook_resid_post": (2, 16, 32),
             "blocks.0.attn.hook_logits": (2, 4, 16, 16), "blocks.0.attn.hook_pattern": (2, 4, 16, 16), "hook_final": (2, 16, 32)},
}


def test_hook_names_and_shapes(variant, padded_batch):
    model = tiny_model(variant)
    tokens, mask = padded_batch
    expected = EXPECTED_HOOKS[variant]
    assert set(expected) <= set(model.hook_dict)
    _, cache = model.run_with_cache(tokens, attention_mask=mask, names_filter=list(expected))
    assert {name: tuple(t.shape) for name, t in cache.items()} == expected
    if variant != "ap":
        assert "hook_pos_embed" not in model.hook_dict
    if variant in ("rope", "ap", "nope"):  # no relative bias
        assert not any(name.endswith("hook_logits_rp") for name in model.hook_dict)


def test_pattern_rows_sum_to_one_and_ignore_padding(variant, padded_batch):
    model = tiny_model(variant)
    tokens, mask = padded_batch
    _, cache = model.run_with_cache(tokens, attention_mask=mask, names_filter="blocks.0.attn.hook_pattern")
    pattern = cache["blocks.0.attn.hook_pattern"]
    torch.testing.assert_close(pattern.sum(-1), torch.ones(2, 4, 16))
    assert pattern[1, :, :, 11:].abs().max() == 0


def test_dstg_logit_terms_sum_to_the_pattern(padded_batch):
    model = tiny_model("dstg")
    with torch.no_grad():  # non-zero RP bias so all three terms matter
        model.blocks[1].attn.rel_bias.bias.normal_()
    tokens, mask = padded_batch
    names = [f"blocks.1.attn.hook_{n}" for n in ("logits_sem", "logits_ap", "logits_rp", "pattern")]
    _, cache = model.run_with_cache(tokens, attention_mask=mask, names_filter=names)
    logits = sum(cache[n] for n in names[:3])
    logits = logits.masked_fill(~mask[:, None, None, :], float("-inf"))
    torch.testing.assert_close(logits.softmax(-1), cache[names[3]], atol=1e-6, rtol=1e-5)
    assert cache["blocks.1.attn.hook_logits_rp"].abs().max() > 0


def test_fused_attention_matches_reference(variant, padded_batch):
    """The fused SDPA path (no hooks) equals the materialised path a logit hook switches on."""
    model = tiny_model(variant).eval()
    if variant in ("dstg", "rp"):
        with torch.no_grad():
            for block in model.blocks:
                block.attn.rel_bias.bias.normal_()
    tokens, mask = padded_batch
    fused = model(tokens, mask)
    reference = model.run_with_hooks(
        tokens, attention_mask=mask, fwd_hooks=[(lambda n: n.endswith("hook_pattern"), lambda t, hook: t)]
    )
    torch.testing.assert_close(fused, reference, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("with_mask", [False, True])
def test_bf16_training_attention_on_a_cpu_runs_the_fused_kernel_in_float32(with_mask):
    """RoPE's and AP's training attention under bf16 autocast: the CPU flash kernel's bf16 backward is
    slow, so ``fused_attention`` runs it in float32 and hands back bf16; without gradients it stays bf16."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 16, 8, generator=gen, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    mask = torch.zeros(2, 1, 1, 16, dtype=torch.bfloat16) if with_mask else None
    if mask is not None:
        mask[1, ..., 11:] = torch.finfo(torch.bfloat16).min
    with torch.autocast("cpu", dtype=torch.bfloat16):
        z = fused_attention(q, k, v, mask, 8 ** -0.5)
    z.float().square().sum().backward()
    reference_inputs = [t.detach().float().requires_grad_() for t in (q, k, v)]
    reference = F.scaled_dot_product_attention(*reference_inputs, attn_mask=None if mask is None else mask.float(), scale=8 ** -0.5)
    reference.to(torch.bfloat16).float().square().sum().backward()
    assert z.dtype == torch.bfloat16
    torch.testing.assert_close(z, reference.to(torch.bfloat16))
    for t, r in zip((q, k, v), reference_inputs):
        assert t.grad.dtype == torch.bfloat16
        torch.testing.assert_close(t.grad, r.grad.to(torch.bfloat16))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        torch.testing.assert_close(fused_attention(q, k, v, mask, 8 ** -0.5),
                                   F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=8 ** -0.5))


@pytest.mark.parametrize("variant", ["dstg", "rp"])
@pytest.mark.parametrize("padded", [False, True])
def test_the_three_attention_paths_agree_in_values_and_gradients(variant, padded, padded_batch):
    """A learned relative bias runs one of three attention paths: fused SDPA without gradients, the
    bias-gradient path in training (``attention_with_learned_bias``) and the materialised path a hook
    switches on.  All three give the same logits, and the two with gradients the same gradients."""
    model = tiny_model(variant)
    with torch.no_grad():
        for block in model.blocks:
            block.attn.rel_bias.bias.normal_()
    tokens, mask = padded_batch
    mask = mask if padded else None
    labels = torch.where(torch.arange(tokens.numel()).view(tokens.shape) % 3 == 0, tokens, -100)
    hooked = [(lambda n: n.endswith("hook_pattern"), lambda t, hook: t)]

    def loss_and_grads(**kwargs):
        model.zero_grad()
        out = model.run_with_hooks(tokens, attention_mask=mask, labels=labels, **kwargs) if kwargs else model(tokens, mask, labels=labels)
        out.loss.backward()
        return out.logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    training_logits, training_grads = loss_and_grads()
    reference_logits, reference_grads = loss_and_grads(fwd_hooks=hooked)
    with torch.no_grad():
        fused_logits = model(tokens, mask)
    torch.testing.assert_close(training_logits, reference_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fused_logits, reference_logits, atol=1e-5, rtol=1e-5)
    assert training_grads.keys() == reference_grads.keys()
    assert any("rel_bias" in name for name in training_grads)
    for name, grad in training_grads.items():
        torch.testing.assert_close(grad, reference_grads[name], atol=1e-5, rtol=1e-4, msg=name)


def reference_dstg_attention(attn, x_sem, x_ap, mask):
    """Plain per-head loop, written independently of the model code, for one DSTG attention layer."""
    H, dh = attn.n_heads, attn.d_head
    qs, ks, vs = x_sem @ attn.qkv_sem.weight.T[:, : H * dh], x_sem @ attn.qkv_sem.weight.T[:, H * dh : 2 * H * dh], x_sem @ attn.qkv_sem.weight.T[:, 2 * H * dh :]
    qa, ka, va = x_ap @ attn.qkv_ap.weight.T[:, : H * dh], x_ap @ attn.qkv_ap.weight.T[:, H * dh : 2 * H * dh], x_ap @ attn.qkv_ap.weight.T[:, 2 * H * dh :]
    T = x_sem.shape[1]
    buckets = t5_relative_buckets(T, T, attn.rel_bias.bias.shape[0], 128)
    dvs, dva = vs.shape[-1] // H, va.shape[-1] // H
    out_s, out_a = [], []
    for h in range(H):
        sl = slice(h * dh, (h + 1) * dh)
        logits = (qs[..., sl] @ ks[..., sl].transpose(1, 2) + qa[..., sl] @ ka[..., sl].transpose(1, 2)) / math.sqrt(dh)
        logits = logits + attn.rel_bias.bias[buckets, h] + torch.where(mask[:, None, :], 0.0, float("-inf"))
        p = logits.softmax(-1)
        out_s.append(p @ vs[..., h * dvs : (h + 1) * dvs])
        out_a.append(p @ va[..., h * dva : (h + 1) * dva])
    return attn.out_sem(torch.cat(out_s, -1)), attn.out_ap(torch.cat(out_a, -1))


def test_dstg_fused_attention_matches_plain_loop(padded_batch):
    model = tiny_model("dstg")
    attn = model.blocks[0].attn
    with torch.no_grad():
        attn.rel_bias.bias.normal_()
    _, mask = padded_batch
    x_sem, x_ap = torch.randn(2, 16, 24), torch.randn(2, 16, 8)
    from dstg_interp.model.layers import additive_key_mask

    want = reference_dstg_attention(attn, x_sem, x_ap, mask)
    got = attn(x_sem, x_ap, additive_key_mask(mask, torch.float32))  # training: the bias-gradient path
    with torch.no_grad():
        got_fused = attn(x_sem, x_ap, additive_key_mask(mask, torch.float32))  # fused SDPA
    for g, f, w in zip(got, got_fused, want):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(f, w, atol=1e-5, rtol=1e-5)


def test_final_ap_stream_gets_exactly_zero_mlm_gradient(padded_batch):
    model = tiny_model("dstg")
    tokens, mask = padded_batch
    captured = {}

    def keep(tensor, hook):
        tensor.retain_grad()
        captured[hook.name] = tensor

    last = model.config.n_layers - 1
    names = [f"blocks.{last}.hook_resid_post_ap", f"blocks.{last}.hook_resid_post_sem", f"blocks.{last}.hook_resid_pre_ap"]
    with model.hooks(fwd_hooks=[(n, keep) for n in names]):
        out = model(tokens, mask, labels=tokens)
    out.loss.backward()
    final_ap = captured[names[0]]
    assert final_ap.grad is None or final_ap.grad.abs().max() == 0
    assert captured[names[1]].grad.abs().max() > 0
    assert captured[names[2]].grad.abs().max() > 0  # earlier AP still steers attention patterns
    # parameters that only write into the final AP stream get no gradient (the last attention's AP
    # output still reaches the semantic stream through the last FFN, so it does get one)
    for param in (model.blocks[last].mlp.w_out_ap.weight, model.final_norm_ap.weight):
        assert param.grad is None or param.grad.abs().max() == 0


def test_ap_table_is_ignored_when_ap_qk_are_zero(padded_batch):
    """With zero AP q/k weights the AP stream cannot reach the semantic stream except through the FFN,
    so zeroing its FFN read too must make the logits independent of the AP table."""
    model = tiny_model("dstg").eval()
    with torch.no_grad():
        for block in model.blocks:
            hd = 2 * model.config.n_heads * model.config.d_head
            block.attn.qkv_ap.weight[:hd].zero_()
            block.mlp.w_in.weight[:, model.config.d_sem :].zero_()
    tokens, mask = padded_batch
    before = model(tokens, mask)
    with torch.no_grad():
        model.ap_embed.weight.normal_(std=5.0)
    after = model(tokens, mask)
    assert torch.equal(before, after)


def test_quirk_option_changes_the_residual(padded_batch):
    tokens, mask = padded_batch
    standard = tiny_model("dstg").eval()
    quirk = tiny_model("dstg", residual_from_normed=True).eval()
    quirk.load_state_dict(standard.state_dict())
    assert not torch.allclose(standard(tokens, mask), quirk(tokens, mask))


def test_normed_residual_block_is_norm_x_plus_f_norm_x(padded_batch):
    """The authors' residual form, written out by hand for one block and both streams:
    x <- norm_attn(x) + attn(norm_attn(x)); x <- norm_mlp(x) + mlp(norm_mlp(x)), against the block's forward."""
    tokens, mask = padded_batch
    model = tiny_model("dstg", residual_from_normed=True).eval()
    block = model.blocks[0]
    with torch.no_grad():
        x_sem = torch.randn(*tokens.shape, model.config.d_sem) * 3
        x_ap = torch.randn(*tokens.shape, model.config.d_ap) * 0.1
        key_mask = additive_key_mask(mask, torch.float32)
        n_sem, n_ap = block.norm_attn_sem(x_sem), block.norm_attn_ap(x_ap)
        a_sem, a_ap = block.attn(n_sem, n_ap, key_mask)
        h_sem, h_ap = n_sem + a_sem, n_ap + a_ap
        m_sem, m_ap = block.mlp(block.norm_mlp_sem(h_sem), block.norm_mlp_ap(h_ap))
        want_sem, want_ap = block.norm_mlp_sem(h_sem) + m_sem, block.norm_mlp_ap(h_ap) + m_ap
        got_sem, got_ap = block(x_sem, x_ap, key_mask)
    torch.testing.assert_close(got_sem, want_sem, rtol=0, atol=1e-6)
    torch.testing.assert_close(got_ap, want_ap, rtol=0, atol=1e-6)
    # and the carried AP residual has RMS ~1 plus the update: the raw input's small scale is gone
    assert got_ap.pow(2).mean().sqrt() > 0.5 > x_ap.pow(2).mean().sqrt()


def test_stop_at_layer_skips_later_blocks(variant, padded_batch):
    model = tiny_model(variant)
    tokens, mask = padded_batch
    seen = []
    out = model.run_with_hooks(
        tokens, attention_mask=mask, stop_at_layer=1,
        fwd_hooks=[(lambda n: "resid_post" in n, lambda t, hook: seen.append(hook.name))],
    )
    assert out.logits is None
    assert seen and all(name.startswith("blocks.0.") for name in seen)


def test_t5_buckets_are_symmetric_exact_then_log_then_clipped():
    b = t5_relative_buckets(1, 300, 32, 128)[0]  # offsets 0..299 (keys after the query)
    assert b[:8].tolist() == [0] + [16 + i for i in range(1, 8)]  # offset 0 shares the 'before' half
    assert (b[1:].diff() >= 0).all() and b[80] < 31 and b[128:].eq(31).all()
    back = t5_relative_buckets(300, 1, 32, 128)[:, 0]  # offsets 0..-299
    assert back[:8].tolist() == list(range(8)) and back[200] == 15
    assert len(set(b.tolist()) | set(back.tolist())) == 31  # as in T5, bucket 16 (offset +0) is never used


def test_rope_is_relative():
    """Rotary scores depend on the offset only: shifting both q and k positions keeps q.k."""
    from dstg_interp.model.layers import Rotary

    rot = Rotary(8, 40, 10000.0)
    q, k = torch.randn(8), torch.randn(8)
    seq = torch.zeros(1, 1, 40, 8)
    seq[0, 0, 3], seq[0, 0, 7] = q, k
    a = rot(seq)
    seq2 = torch.zeros(1, 1, 40, 8)
    seq2[0, 0, 13], seq2[0, 0, 17] = q, k
    b = rot(seq2)
    torch.testing.assert_close(a[0, 0, 3] @ a[0, 0, 7], b[0, 0, 13] @ b[0, 0, 17])


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(variant="bert", d_model=32), "variant"),
        (dict(variant="dstg", d_sem=24), "d_ap"),
        (dict(variant="dstg", d_sem=24, d_ap=8, d_model=30), "d_model"),
        (dict(variant="rope"), "d_model"),
        (dict(variant="rope", d_model=32, d_sem=8), "d_sem"),
        (dict(variant="rope", d_model=30, n_heads=4), "d_head"),
        (dict(variant="rope", d_model=32, d_head=7, n_heads=4), "d_head"),
        (dict(variant="ap", d_model=32, n_layers=0), "n_layers"),
        (dict(variant="dstg", d_sem=24, d_ap=6, n_heads=4), "d_ap"),
        (dict(variant="rp", d_model=32, residual_from_normed=True), "residual_from_normed"),
    ],
)
def test_invalid_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=rf"ModelConfig\.{field}") as err:
        ModelConfig(**kwargs)
    assert "\n" not in str(err.value)


def test_config_json_round_trip(variant):
    cfg = tiny_config(variant)
    assert ModelConfig.from_json(cfg.to_json()) == cfg


@pytest.mark.parametrize(
    "make_input, message",
    [
        (lambda: (torch.randint(5, 97, (2, 41)), None), "exceeds max_positions=40"),
        (lambda: (torch.full((2, 8), 97), None), "outside the vocabulary"),
        (lambda: (torch.full((2, 8), -1), None), "outside the vocabulary"),
        (lambda: (torch.randint(5, 97, (2, 8)), torch.ones(2, 7)), "attention_mask has shape"),
        (lambda: (torch.rand(2, 8), None), "integer torch.Tensor"),
        (lambda: (torch.zeros(1, 0, dtype=torch.long), None), "hold no token"),
        (lambda: (torch.zeros(0, 8, dtype=torch.long), None), "hold no token"),
    ],
)
def test_bad_inputs_raise_clear_errors(variant, make_input, message):
    model = tiny_model(variant)
    tokens, mask = make_input()
    with pytest.raises((ValueError, TypeError), match=message):
        model(tokens, mask)


def test_ap_table_only_for_models_that_have_one(variant):
    model = tiny_model(variant)
    if variant in ("dstg", "ap"):
        assert model.ap_table.shape[0] == 40
    else:
        with pytest.raises(ValueError, match="no learned position table"):
            model.ap_table


@pytest.mark.parametrize("variant", ["dstg", "ap"])
def test_position_offset_reads_the_table_from_a_start(variant):
    model = tiny_model(variant).eval()
    tokens = torch.randint(5, 97, (2, 10))
    hook = "hook_embed_ap" if variant == "dstg" else "hook_pos_embed"
    _, cache = model.run_with_cache(tokens, position_offset=torch.tensor([0, 7]), names_filter=hook)
    torch.testing.assert_close(cache[hook][0], model.ap_table[:10])
    torch.testing.assert_close(cache[hook][1], model.ap_table[7:17])
    with torch.inference_mode():  # offset 0 everywhere is the plain forward
        torch.testing.assert_close(model(tokens, position_offset=torch.zeros(2, dtype=torch.long)), model(tokens))
    with pytest.raises(ValueError, match=r"position_offset must lie in \[0, max_positions - seq_len\] = \[0, 30\]"):
        model(tokens, position_offset=torch.tensor([0, 31]))
    with pytest.raises(ValueError, match="one shift per sequence"):
        model(tokens, position_offset=torch.tensor([1]))
