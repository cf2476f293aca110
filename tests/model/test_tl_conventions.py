"""TransformerLens habits work: run_with_cache gives an ActivationCache, per-head q/k/v/z and MLP hidden hooks
exist, cost nothing unused, and patching one head through its hook changes exactly what that head writes."""

import pytest
import torch
import torch.nn.functional as F
from transformer_lens import ActivationCache

from conftest import VARIANTS, tiny_model
from dstg_interp.tiny_zoo import tiny_zoo

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
        clean = model(tokens)
        patched = model.run_with_hooks(tokens, fwd_hooks=[(name, ablate)])
        out = model.blocks[0].attn.out_sem if variant == "dstg" else model.blocks[0].attn.out
        width = out.weight.shape[1] // model.config.n_heads
        out.weight[:, head * width:(head + 1) * width] = 0.0
        reference = model(tokens)
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
        clean = model(tokens)
        assert len(calls) == model.config.n_layers
        stream = "_ap" if variant == "dstg" else ""
        same = model.run_with_hooks(tokens, fwd_hooks=[(f"blocks.1.attn.hook_{n}{stream}", lambda x, hook: x)
                                                       for n in "qkvz"] + [("blocks.0.mlp.hook_post", lambda x, hook: x)])
    torch.testing.assert_close(same, clean, rtol=1e-5, atol=1e-5)


# --- the TransformerLens tutorial moves, on every variant -------------------------------------------
CLEAN, CORRUPT = "The miller carried a copper pot at dawn.", "The baker carried a copper pot at dawn."  # same length


@pytest.fixture(scope="module")
def text_models():
    """The tiny zoo: random models of every variant with the tokenizer they share."""
    models, _ = tiny_zoo(VARIANTS, n_docs=12)
    return models


def stream_names(model, name: str) -> list[str]:
    """The hook(s) of a residual-width name: DSTG's two streams, a baseline's one."""
    return [f"{name}_{s}" for s in ("sem", "ap")] if model.config.variant == "dstg" else [name]


@pytest.mark.parametrize("variant", VARIANTS)
@torch.no_grad()
def test_text_in_logits_first_out(variant, text_models):
    """to_tokens / to_str_tokens / to_string and string input; a plain call and run_with_cache give logits
    first, as TransformerLens does, and return_type reaches the MaskedLMOutput, the loss and nothing."""
    model = text_models[variant]
    tokens = model.to_tokens(CLEAN)
    assert tokens.dtype == torch.long and tokens.shape[0] == 1
    strs = model.to_str_tokens(CLEAN)
    assert strs[0] == "[CLS]" and strs[-1] == "[SEP]" and len(strs) == tokens.shape[1] == len(model.to_str_tokens(tokens))
    assert "carried a copper pot" in model.to_string(tokens[0])
    assert model.to_tokens(CLEAN, prepend_bos=False).shape[1] == tokens.shape[1] - 2
    logits = model(tokens)
    assert isinstance(logits, torch.Tensor) and logits.shape == (1, tokens.shape[1], model.config.vocab_size)
    torch.testing.assert_close(model(CLEAN), logits)
    out, cache = model.run_with_cache(CLEAN)
    torch.testing.assert_close(out, logits)
    output, _ = model.run_with_cache(tokens, return_type="output")
    torch.testing.assert_close(output.logits, logits)
    assert model(tokens, return_type=None) is None
    labels = torch.where(torch.arange(tokens.shape[1]) == 3, tokens, -100)
    both = model(tokens, labels=labels, return_type="both")
    torch.testing.assert_close(both[1], model(tokens, labels=labels).loss)  # with labels the default stays the output
    torch.testing.assert_close(model(tokens, labels=labels, return_type="loss"), both[1])
    # a padded batch of strings: its mask is built, so each row equals the row alone
    batch = model([CLEAN, "A weaver."])
    torch.testing.assert_close(batch[1, :model.to_tokens("A weaver.").shape[1]], model("A weaver.")[0], atol=1e-5, rtol=1e-5)
    assert model.to_single_token("the") == model.to_tokens("the", prepend_bos=False)[0, 0]
    with pytest.raises(ValueError, match="not one"):
        model.to_single_token("the door")
    with pytest.raises(ValueError, match="return_type"):
        model(tokens, return_type="logit")
    with pytest.raises(ValueError, match="needs labels"):
        model(tokens, return_type="loss")


@pytest.mark.parametrize("variant", VARIANTS)
@torch.no_grad()
def test_tutorial_moves(variant, text_models):
    """Cache indexing with TL names, a head ablation through a hook, activation patching of one position,
    decompose_resid / accumulated_resid / stack_head_results / logit_attrs: each checked against an
    independent computation."""
    model = text_models[variant]
    dstg = variant == "dstg"
    clean_tokens, corrupt_tokens = model.to_tokens(CLEAN), model.to_tokens(CORRUPT)
    assert clean_tokens.shape == corrupt_tokens.shape and (clean_tokens != corrupt_tokens).sum() >= 1
    clean_logits, cache = model.run_with_cache(clean_tokens)

    # cache indexing: attn_scores is the sum of the logit terms and softmaxes to the pattern
    terms = [name for name in cache if name.startswith("blocks.0.attn.hook_logits")]
    assert len(terms) == (3 if dstg else 2 if variant == "rp" else 1)
    torch.testing.assert_close(cache["attn_scores", 0], sum(cache[name] for name in terms))
    torch.testing.assert_close(cache["attn_scores", 0].softmax(-1), cache["pattern", 0])
    assert torch.equal(cache["blocks.0.attn.hook_attn_scores"], cache["attn_scores", 0])
    torch.testing.assert_close(cache["result", 1].sum(-2), cache["attn_out", 1], atol=1e-5, rtol=1e-5)
    assert cache["resid_post", -1].shape == (1, clean_tokens.shape[1], model.config.d_model)
    if dstg:
        assert torch.equal(cache["pos_embed"], cache["hook_embed_ap"])  # DSTG's position embedding: its AP rows
    assert cache.stack_activation("attn_scores").shape[0] == model.config.n_layers
    with pytest.raises(KeyError, match="no such hook.*'post'"):
        cache["pre", 0]  # TL's MLP pre-activation: these SwiGLUs hook only their hidden units
    with pytest.raises(KeyError, match="Short names it reads"):
        cache["attn_scorez", 0]
    with pytest.raises(KeyError, match="not in this cache.*names_filter"):
        model.run_with_cache(clean_tokens, names_filter="blocks.0.hook_resid_post" + ("_sem" if dstg else ""))[1]["resid_pre", 0]

    # head ablation: zero head 2 of block 1 in its z hook(s) -> the same logits as zeroing its columns of W_O
    def ablate_head(z, hook, head=2):
        z[:, :, head] = 0.0
        return z

    z_hooks = [(f"blocks.1.attn.{name}", ablate_head) for name in stream_names(model, "hook_z")]
    ablated = model.run_with_hooks(clean_tokens, fwd_hooks=z_hooks)
    heads = cache.stack_head_results(layer=2)  # [layer * head, batch, pos, d]
    assert heads.shape[0] == 2 * model.config.n_heads
    assert not torch.allclose(ablated, clean_logits, atol=1e-4)
    with pytest.raises(KeyError, match="once per stream" if dstg else "no such hook"):
        model.run_with_hooks(clean_tokens, fwd_hooks=[("blocks.1.attn.hook_zz" if not dstg else "blocks.1.attn.hook_z", ablate_head)])

    # activation patching of one position: the clean final residual at position p into the corrupted run
    # changes the logits at p alone, to the clean ones (the final norm and the head act per position)
    p = int((clean_tokens != corrupt_tokens).nonzero()[0, 1])
    last = model.config.n_layers - 1

    def patch(resid, hook):
        resid[:, p] = cache[hook.name][:, p]
        return resid

    resid_hooks = stream_names(model, f"blocks.{last}.hook_resid_post")
    corrupt_logits = model(corrupt_tokens)
    patched = model.run_with_hooks(corrupt_tokens, fwd_hooks=[(name, patch) for name in resid_hooks])
    torch.testing.assert_close(patched[:, p], clean_logits[:, p], atol=1e-5, rtol=1e-5)
    others = torch.arange(clean_tokens.shape[1]) != p
    torch.testing.assert_close(patched[:, others], corrupt_logits[:, others], atol=1e-5, rtol=1e-5)
    # earlier in the model, one position's patch reaches every position through attention
    early = model.run_with_hooks(corrupt_tokens, fwd_hooks=[(name, patch) for name in stream_names(model, "blocks.0.hook_resid_post")])
    assert not torch.allclose(early[:, others], corrupt_logits[:, others], atol=1e-6)

    # decompose_resid: per stream, the components sum to the residual they decompose
    for stream in ((None, "sem", "ap") if dstg else (None,)):
        stack, labels = cache.decompose_resid(layer=1, return_labels=True, stream=stream)
        resid = cache["resid_pre" + (f"_{stream}" if stream else ""), 1]
        torch.testing.assert_close(stack.sum(0), resid, atol=1e-5, rtol=1e-5)
        assert labels[-2:] == ["0_attn_out", "0_mlp_out"]
        final = cache.decompose_resid(stream=stream)
        torch.testing.assert_close(final.sum(0), cache["resid_post" + (f"_{stream}" if stream else ""), -1], atol=1e-5, rtol=1e-5)
        heads = cache.stack_head_results(incl_remainder=True, stream=stream)
        torch.testing.assert_close(heads.sum(0), final.sum(0), atol=1e-5, rtol=1e-5)
    # direct logit attribution: the components' attributions plus the head's bias are the logit
    head_stream = "sem" if dstg else None
    target = int(clean_tokens[0, p])
    attributions = cache.logit_attrs(cache.decompose_resid(stream=head_stream), target)
    torch.testing.assert_close(attributions.sum(0) + model.b_U[target], clean_logits[..., target], atol=1e-4, rtol=1e-4)
    # the logit lens: the last accumulated state through the final norm and W_U is the model's logits
    lens = cache.accumulated_resid(apply_ln=True, stream=head_stream)
    torch.testing.assert_close(lens[-1] @ model.W_U + model.b_U, clean_logits, atol=1e-4, rtol=1e-4)
    if dstg:
        with pytest.raises(ValueError, match="semantic stream only"):
            cache.logit_attrs(cache.decompose_resid(stream="ap"), target)
    # a layer is an integer (a 0-d tensor one too), never a word, a fraction or a bool (True is not layer 1)
    torch.testing.assert_close(cache.decompose_resid(layer=torch.tensor(1)), cache.decompose_resid(layer=1))
    for layer in ("abc", 1.5, True):
        with pytest.raises(TypeError, match="layer must be an integer"):
            cache.decompose_resid(layer=layer)


def test_transformer_lens_patching_helper_runs_on_a_baseline(text_models):
    """With logits first, TransformerLens' own patching helpers drive our models (one-stream names)."""
    from transformer_lens import patching

    model = text_models["rope"]
    clean_tokens, corrupt_tokens = model.to_tokens(CLEAN), model.to_tokens(CORRUPT)
    _, cache = model.run_with_cache(clean_tokens)
    target = int(clean_tokens[0, 2])
    results = patching.get_act_patch_resid_pre(model, corrupt_tokens, cache, lambda logits: logits[0, 2, target])
    assert results.shape == (model.config.n_layers, clean_tokens.shape[1])
    assert torch.isfinite(results).all()


def test_text_needs_a_tokenizer():
    model = tiny_model("rope")
    with pytest.raises(ValueError, match="no tokenizer"):
        model("a sentence")


@torch.no_grad()
def test_the_normed_residual_decomposes_with_each_component_scaled_by_the_norms_it_passed(padded_batch):
    """The authors' DSTG (``residual_from_normed``: each block carries norm(x) forward) decomposes too: every
    component scaled by the RMSNorms it passed through, with the cached residual's scale at each, sums to the
    residual entering each block, at the final state and at an MLP's input, per stream and for [sem | ap]; direct
    logit attribution then adds up to the logit, as in a plain pre-norm model. Built by hand for block 0."""
    tokens, mask = padded_batch
    model = tiny_model("dstg", residual_from_normed=True).eval()
    logits, cache = model.run_with_cache(tokens, mask)
    n_layers = model.config.n_layers
    for stream in (None, "sem", "ap"):
        suffix = f"_{stream}" if stream else ""
        for layer in range(n_layers + 1):
            stack, labels = cache.decompose_resid(layer=layer, return_labels=True, stream=stream)
            wanted = cache["resid_pre" + suffix, layer] if layer < n_layers else cache["resid_post" + suffix, -1]
            torch.testing.assert_close(stack.sum(0), wanted, atol=1e-5, rtol=1e-5)
            assert len(labels) == stack.shape[0] == (2 if stream is None else 1) + 2 * layer
        mid = cache.decompose_resid(layer=1, mlp_input=True, stream=stream)
        torch.testing.assert_close(mid.sum(0), cache["resid_mid" + suffix, 1], atol=1e-5, rtol=1e-5)
    # by hand, block 0's semantic stream: embed through norm_attn, + attn_out, both through norm_mlp, + mlp_out
    block, resid_pre, resid_mid = model.blocks[0], cache["resid_pre_sem", 0], cache["resid_mid_sem", 0]

    def scale(norm, residual):  # the RMSNorm as a per-position linear map, at the cached residual's scale
        return norm.weight * residual.pow(2).mean(-1, keepdim=True).add(norm.eps).rsqrt()

    embed = cache["hook_embed_sem"] * scale(block.norm_attn_sem, resid_pre) * scale(block.norm_mlp_sem, resid_mid)
    attn = cache["attn_out_sem", 0] * scale(block.norm_mlp_sem, resid_mid)
    stack, labels = cache.decompose_resid(layer=1, return_labels=True, stream="sem")
    assert labels == ["embed", "0_attn_out", "0_mlp_out"]
    for got, want in zip(stack, (embed, attn, cache["mlp_out_sem", 0])):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
    # filtered stacks keep the scaled components, and direct logit attribution sums to the logit
    only_attn = cache.decompose_resid(layer=2, mode="attn", incl_embeds=False, return_labels=True, stream="sem")
    assert only_attn[1] == ["0_attn_out", "1_attn_out"]
    target = int(tokens[0, 2])
    attributions = cache.logit_attrs(cache.decompose_resid(stream="sem"), target)
    torch.testing.assert_close(attributions.sum(0) + model.b_U[target], logits[..., target], atol=1e-4, rtol=1e-4)
