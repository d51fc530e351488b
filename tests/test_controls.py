"""Controls of the white-box figures on models whose answer is known before measuring."""

from __future__ import annotations

import timm
import torch

import crate  # noqa: F401
from crate.metrics import compression_controls, layerwise_values, trace_model


def _model(projection: str) -> torch.nn.Module:
    """crate_nano whose attention output projection is zero, U_[K] (the theory's step) or -U_[K]."""
    torch.manual_seed(0)
    model = timm.create_model("crate_nano_patch4_32", num_classes=10).eval()
    with torch.no_grad():
        for block in model.blocks:
            attn = block.attn
            subspaces = attn.qkv.weight.T  # (d, K p): [U_1 ... U_K]
            scale = {"zero": 0.0, "theory": 0.7, "against": -0.7}[projection]
            attn.proj.weight.copy_(scale * subspaces)
            attn.proj.bias.zero_()
    return model


def _figures(model: torch.nn.Module) -> tuple[dict, dict]:
    images = torch.randn(6, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    traces = trace_model(model, images)
    values = layerwise_values(traces, quantities=("Rc_before_attention", "Rc_after_attention"))
    return values, compression_controls(model.blocks, traces)


def test_without_an_update_the_negated_step_measures_what_no_step_measures() -> None:
    values, controls = _figures(_model("zero"))
    for layer in range(4):
        before, after = values["Rc_before_attention"][layer], values["Rc_after_attention"][layer]
        torch.testing.assert_close(after, before, rtol=0, atol=0)
        torch.testing.assert_close(controls["Rc_after_attention_negated"][layer], before, rtol=1e-12, atol=1e-9)


def test_a_model_whose_projection_is_u_takes_the_theory_step() -> None:
    values, controls = _figures(_model("theory"))
    for layer in range(4):
        theory = controls["Rc_after_attention_theory_step"][layer]
        torch.testing.assert_close(theory, values["Rc_after_attention"][layer], rtol=1e-5, atol=1e-4)
        assert not torch.allclose(controls["Rc_after_attention_negated"][layer], theory, rtol=1e-3)


def test_a_model_whose_projection_is_minus_u_is_the_theory_step_negated() -> None:
    values, controls = _figures(_model("against"))
    for layer in range(4):
        torch.testing.assert_close(
            controls["Rc_after_attention_negated"][layer],
            controls["Rc_after_attention_theory_step"][layer],
            rtol=1e-5,
            atol=1e-4,
        )
        assert not torch.allclose(
            values["Rc_after_attention"][layer], controls["Rc_after_attention_theory_step"][layer]
        )


def test_tost_has_no_maps_and_no_theory_step() -> None:
    model = timm.create_model("tost_nano_patch4_32", num_classes=10).eval()
    traces = trace_model(model, torch.randn(2, 3, 32, 32))
    controls = compression_controls(model.blocks, traces)
    assert all(value is None for value in controls["Rc_after_attention_theory_step"])
    assert all(value is not None for value in controls["Rc_after_attention_negated"])
