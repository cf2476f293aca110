"""nnsight on our models: ``NNsight(model)`` traces every zoo variant and an HF encoder read by the adapter, and a
stream read or set inside a trace is exactly what ``run_with_hooks`` (or, for the HF encoder, the adapter's
``states`` and a plain torch forward hook) gives -- compared with ``torch.equal``, not a tolerance.

Both sides run under the same grad mode: with grad on, a learned RP bias (DSTG, RP) takes the attention path that
gives its gradient, without it the fused SDPA kernel, and the two differ in the last bits (~1e-9).
nnsight is the ``[tools]`` extra, installed in CI through ``[test]``.
"""

import pytest
import torch

from conftest import VARIANTS, tiny_model
from dstg_interp import load_model
from dstg_interp.encoders import layer_hooks
from dstg_interp.encoders.hf import load_hf_encoder
from dstg_interp.tiny_zoo import tiny_documents
from hf_writers import write_tiny_bert

nnsight = pytest.importorskip("nnsight", reason="nnsight is the [tools] extra: pip install -e '.[tools]'")
NNsight = nnsight.NNsight


def batch(vocab: int = 97):
    tokens = torch.randint(5, vocab, (2, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 12, dtype=torch.bool)
    mask[1, 9:] = False
    return tokens.masked_fill(~mask, 0), mask


def stream_hooks(variant: str, layer: int) -> list[str]:
    """The residual stream(s) after block ``layer - 1``, in the order the block writes them (sem, then AP):
    nnsight requires a trace to touch modules in execution order."""
    return layer_hooks(variant, layer, "full")


@pytest.mark.parametrize("variant", VARIANTS)
def test_reading_a_stream_in_a_trace_is_what_run_with_hooks_reads(variant):
    model, (tokens, mask) = tiny_model(variant).eval(), batch()
    names = stream_hooks(variant, 2)
    traced, read = NNsight(model), {}
    with traced.trace(tokens, mask):
        for name in names:
            read[name] = traced.get(name).output.save()
        logits = traced.output.save()
    held = {}
    expected = model.run_with_hooks(tokens, mask, fwd_hooks=[(name, lambda x, hook: held.update({hook.name: x.detach().clone()}))
                                                            for name in names])
    assert set(read) == set(held) == set(names)
    for name in names:
        assert torch.equal(read[name], held[name]), name
    assert torch.equal(logits, expected)


@pytest.mark.parametrize("variant", VARIANTS)
def test_setting_a_stream_in_a_trace_is_what_run_with_hooks_sets(variant):
    """An AP-stream patch (DSTG: AP residual of block 0 from another batch; baselines: the residual)."""
    model, (tokens, mask) = tiny_model(variant).eval(), batch()
    name = "blocks.0.hook_resid_post_ap" if variant == "dstg" else "blocks.0.hook_resid_post"
    source = tokens.roll(1, dims=1)
    held = {}
    model.run_with_hooks(source, mask, fwd_hooks=[(name, lambda x, hook: held.update(x=x.detach().clone()))])

    def patch(x, hook):
        x[:, 3] = held["x"][:, 3]
        return x

    expected = model.run_with_hooks(tokens, mask, fwd_hooks=[(name, patch)])
    traced = NNsight(model)
    with traced.trace(tokens, mask):
        traced.get(name).output[:, 3] = held["x"][:, 3]
        patched = traced.output.save()
    plain = model(tokens, mask)
    assert torch.equal(patched, expected)
    assert not torch.equal(patched, plain)  # the patch changed something


def test_zoo_dstg_ap_stream_patch_with_grad_off():
    """The shipped DSTG, the two ways side by side under torch.no_grad (the fused path), one block's two streams."""
    model, (tokens, mask) = load_model("dstg").eval(), batch(8192)
    traced = NNsight(model)
    with torch.no_grad():
        with traced.trace(tokens, mask):
            sem = traced.blocks[3].hook_resid_post_sem.output.save()
            traced.blocks[3].hook_resid_post_ap.output[:] = 0.0
            patched = traced.output.save()
        held = {}
        expected = model.run_with_hooks(tokens, mask, fwd_hooks=[
            ("blocks.3.hook_resid_post_sem", lambda x, hook: held.update(sem=x.clone())),
            ("blocks.3.hook_resid_post_ap", lambda x, hook: torch.zeros_like(x))])
    assert torch.equal(sem, held["sem"]) and torch.equal(patched, expected)


def test_an_out_of_order_read_is_nnsight_s_error_not_a_wrong_value():
    """nnsight refuses a trace that touches the AP residual before the semantic one (the block writes sem first)."""
    model, (tokens, mask) = tiny_model("dstg").eval(), batch()
    traced = NNsight(model)
    with pytest.raises(Exception, match="already ran past"):
        with traced.trace(tokens, mask):
            traced.blocks[1].hook_resid_post_ap.output.save()
            traced.blocks[1].hook_resid_post_sem.output.save()


def test_hf_encoder_read_by_the_adapter_traces(tmp_path):
    """The adapter's model (a transformers BertModel; a block returns a tensor in transformers 5): a block's output
    read in a trace is the adapter's state at that layer, and a write is what a plain torch forward hook writes."""
    write_tiny_bert(tmp_path / "bert", tiny_documents(n_docs=8, seed=0))
    encoder = load_hf_encoder(tmp_path / "bert")
    tokens, mask = batch(encoder.vocab_size)
    traced = NNsight(encoder.model)
    with traced.trace(input_ids=tokens, attention_mask=mask.long()):
        layer_1 = traced.encoder.layer[0].output.save()  # hidden_states.1: the state after the first block
    assert torch.equal(layer_1, encoder.states(tokens, layers=[1], attention_mask=mask)[(1, "full")])

    def zero_position_3(module, inputs, output):
        output[:, 3] = 0.0
        return output

    handle = encoder.model.encoder.layer[0].register_forward_hook(zero_position_3)
    try:
        expected = encoder.model(input_ids=tokens, attention_mask=mask.long()).last_hidden_state
    finally:
        handle.remove()
    with traced.trace(input_ids=tokens, attention_mask=mask.long()):
        traced.encoder.layer[0].output[:, 3] = 0.0
        patched = traced.output.save()
    assert torch.equal(patched.last_hidden_state, expected)
    assert not torch.equal(expected, encoder.model(input_ids=tokens, attention_mask=mask.long()).last_hidden_state)


def test_logit_terms_in_a_trace_need_a_transformer_lens_hook_to_be_materialised():
    """A wrapped model keeps its fused attention (nnsight wraps forward, it registers no hook), so the term hook
    points never run and nnsight says the forward ran past them; a no-op TransformerLens hook on them turns the
    materialised path on, and the trace then reads what run_with_cache reads."""
    model, (tokens, mask) = tiny_model("dstg").eval(), batch()
    traced = NNsight(model)
    with pytest.raises(Exception, match="already ran past"):
        with traced.trace(tokens, mask):
            traced.blocks[0].attn.hook_pattern.output.save()
    with model.hooks(fwd_hooks=[(lambda name: ".attn.hook_" in name, lambda x, hook: x)]):
        with traced.trace(tokens, mask):
            ap_term = traced.blocks[0].attn.hook_logits_ap.output.save()
            pattern = traced.blocks[0].attn.hook_pattern.output.save()
    _, cache = model.run_with_cache(tokens, mask)
    assert torch.equal(ap_term, cache["blocks.0.attn.hook_logits_ap"])
    assert torch.equal(pattern, cache["blocks.0.attn.hook_pattern"])


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_sequence_past_the_model_s_positions_is_the_model_s_one_line_error_in_a_trace(variant):
    """nnsight hands the model's own refusal through unchanged: a ValueError of one line naming the limit, and no
    value is left saved."""
    model = tiny_model(variant).eval()
    limit = model.config.max_positions
    tokens = torch.randint(5, 97, (1, limit + 1), generator=torch.Generator().manual_seed(0))
    traced, read = NNsight(model), {}
    message = rf"^sequence length {limit + 1} exceeds max_positions={limit}; truncate the input$"
    with pytest.raises(ValueError, match=message):
        with traced.trace(tokens):
            read["state"] = traced.get(stream_hooks(variant, 1)[0]).output.save()
    assert read == {}
