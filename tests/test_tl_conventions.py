"""TransformerLens habits work: run_with_cache gives an ActivationCache, per-head q/k/v/z and MLP hidden hooks
exist, cost nothing unused, and patching one head through its hook changes exactly what that head writes."""

import pytest
import torch
import torch.nn.functional as F
from transformer_lens import ActivationCache

from conftest import VARIANTS, tiny_model

torch.set_num_threads(1)


@pytest.fixture
def tokens():
    return torch.randint(5, 97, (2, 12), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("variant", VARIANTS)
def test_run_with_cache_returns_an_activation_cache(variant, tokens):
    model = tiny_model(variant).eval()
    _, cache = model.run_with_cache(tokens)
    assert isinstance(cache, ActivationCache)
    stream = "_sem" if variant == "dstg" else ""
    q = cache[f"q{stream}", 0]
    assert q.shape == (2, 12, 4, 8) and torch.equal(q, cache[f"blocks.0.attn.hook_q{stream}"])  # [batch, pos, head, d_head]
    assert cache["post", 1].shape[-1] == model.config.d_mlp  # blocks.1.mlp.hook_post
    resid = cache["resid_post", 1]
    if variant == "dstg":  # the stream-less name is DSTG's 'full' state, [sem | ap]
        assert torch.equal(resid, torch.cat([cache["blocks.1.hook_resid_post_sem"], cache["blocks.1.hook_resid_post_ap"]], -1))
        assert torch.equal(cache["resid_post_ap", -1], cache["blocks.1.hook_resid_post_ap"])
    else:
        assert torch.equal(resid, cache["blocks.1.hook_resid_post"])
    assert cache.stack_activation("resid_post").shape == (2, 2, 12, 32)
    _, plain = model.run_with_cache(tokens, return_cache_object=False)
    assert type(plain) is dict and plain.keys() == cache.keys()


@pytest.mark.parametrize("variant", VARIANTS)
def test_patching_one_head_through_hook_z_is_removing_its_output_columns(variant, tokens):
    """Zeroing head 1's z at block 0 through the hook equals zeroing that head's columns of the output
    projection (an independent way to remove exactly one head), and differs from the clean run."""
    model = tiny_model(variant).eval()
    head, name = 1, "blocks.0.attn.hook_z" + ("_sem" if variant == "dstg" else "")

    def ablate(z, hook):  # [batch, pos, head, d_head]
        z = z.clone()
        z[:, :, head] = 0.0
        return z

    with torch.no_grad():
        clean = model(tokens).logits
        patched = model.run_with_hooks(tokens, fwd_hooks=[(name, ablate)]).logits
        out = model.blocks[0].attn.out_sem if variant == "dstg" else model.blocks[0].attn.out
        width = out.weight.shape[1] // model.config.n_heads
        out.weight[:, head * width:(head + 1) * width] = 0.0
        reference = model(tokens).logits
    assert not torch.allclose(clean, patched, atol=1e-4)
    torch.testing.assert_close(patched, reference, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", VARIANTS)
def test_head_hooks_cost_nothing_when_unused(variant, tokens, monkeypatch):
    """No hook attached: one fused SDPA call per block, as before the per-head hooks existed; a hook that
    returns its input leaves the output unchanged."""
    model = tiny_model(variant).eval()
    calls = []
    fused = F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or fused(*a, **k))
    with torch.no_grad():
        clean = model(tokens).logits
        assert len(calls) == model.config.n_layers
        stream = "_ap" if variant == "dstg" else ""
        same = model.run_with_hooks(tokens, fwd_hooks=[(f"blocks.1.attn.hook_{n}{stream}", lambda x, hook: x)
                                                       for n in "qkvz"] + [("blocks.0.mlp.hook_post", lambda x, hook: x)])
    torch.testing.assert_close(same.logits, clean, rtol=1e-5, atol=1e-5)
