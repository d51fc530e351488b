"""The layer-objective training term: its value is the controls' rate-reduction gain and code sparsity, computed
independently with the zoo's float64 functions; it trains the layers' weights; off by default."""

from __future__ import annotations

import pytest
import timm
import torch

import crate  # noqa: F401
from crate.lit import ImageClassifier
from crate.lit.layer_objective import LayerObjective
from crate.metrics import trace_model
from crate.metrics.functional import coding_rate, compression_rate


@pytest.mark.parametrize("chans, size", [(1, 16), (3, 32)])  # 17 tokens (fewer than p = 24) and 65 (more)
def test_the_term_equals_the_gain_per_unit_size_and_the_code_l1_by_the_zoos_float64_functions(
    chans: int, size: int
) -> None:
    torch.manual_seed(0)
    model = timm.create_model("crate_nano_patch4_32", num_classes=10, in_chans=chans, img_size=size, depth=2)
    objective = LayerObjective(model, max_images=4)
    images = torch.randn(6, chans, size, size)
    model(images)  # a training-mode forward with gradients on: the hooks keep what the term needs
    term = objective.term()
    expected = []
    with torch.no_grad():
        for block, trace in zip(model.blocks, trace_model(model.eval(), images[:4]), strict=True):
            U = block.attn.subspaces.double()

            def rr(tokens: torch.Tensor, U: torch.Tensor = U) -> torch.Tensor:
                tokens = tokens.double()
                return coding_rate(tokens, 0.01, "official") - compression_rate(tokens, U, 0.01, "official")

            z, z_half = trace.z_in.double(), trace.z_half.double()
            size = (z_half - z).flatten(1).norm(dim=1) / z.flatten(1).norm(dim=1)
            gain = rr(trace.attn_input_after) - rr(trace.attn_input)
            expected.append((-(gain / size) / z.shape[1] + trace.sparse_code.double().abs().mean(dim=(1, 2))).mean())
    assert float(term) == pytest.approx(float(torch.stack(expected).mean()), rel=1e-4)
    assert objective.term() == 0  # forgotten after use; a no-grad forward keeps nothing
    with torch.no_grad():
        model(images)
    assert objective.term() == 0


def test_the_weight_adds_the_term_to_the_loss_and_its_gradient_reaches_the_subspaces() -> None:
    torch.manual_seed(0)
    off = ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=16)
    assert off.layer_objective is None and not any(block._forward_pre_hooks for block in off.model.blocks)
    module = ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=16, objective_weight=0.5, objective_images=2)
    assert module.layer_objective.max_images == 2
    module.model(torch.randn(4, 1, 16, 16))
    module.layer_objective.term().backward()
    assert module.model.blocks[0].attn.qkv.weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="objective_weight must be >= 0"):
        ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=16, objective_weight=-1)
    with pytest.raises(ValueError, match="objective_images >= 1"):
        ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=16, objective_weight=0.1, objective_images=0)
    with pytest.raises(ValueError, match="for CRATE, CRATE-alpha, ToST and CBT"):
        ImageClassifier("vit_nano_patch4_32", in_chans=1, img_size=16, objective_weight=0.5)
    for name in ("tost_nano_patch4_32", "cbt_nano_patch4_32"):  # the families the refusal names take the term
        other = ImageClassifier(name, in_chans=1, img_size=16, objective_weight=0.5)
        other.model(torch.randn(4, 1, 16, 16))
        assert torch.isfinite(other.layer_objective.term())


def test_the_term_is_float32_under_bf16_autocast() -> None:
    """Under bf16-mixed training the term is still the float32 computation: the same kept tensors give the same
    value with autocast on and off (bf16 Gram matrices would change it at the second digit, or fail to factor)."""
    torch.manual_seed(0)
    model = timm.create_model("crate_nano_patch4_32", num_classes=10, depth=2)
    objective = LayerObjective(model, max_images=4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(torch.randn(4, 3, 32, 32))
    kept = list(objective.records)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        under_autocast = objective.term()
    objective.records = kept
    plain = objective.term()
    assert under_autocast.dtype == torch.float32
    assert float(under_autocast) == pytest.approx(float(plain), rel=1e-6)


def test_a_card_states_the_terms_weight_and_images(tmp_path) -> None:
    import json

    import lightning as L

    from crate.export import export_checkpoint
    from crate.lit import DigitsDataModule

    torch.manual_seed(0)
    module = ImageClassifier(
        "crate_nano_patch4_32", in_chans=1, img_size=16, warmup_epochs=0, objective_weight=0.01, objective_images=3
    )
    trainer = L.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(module, DigitsDataModule(img_size=16, batch_size=32))
    ckpt = tmp_path / "run" / "checkpoints" / "last.ckpt"
    ckpt.parent.mkdir(parents=True)
    trainer.save_checkpoint(ckpt)
    card = export_checkpoint(ckpt, tmp_path / "objective.safetensors", measure=False)
    assert (card["recipe"]["objective_weight"], card["recipe"]["objective_images"]) == (0.01, 3)
    assert "| objective_images | 3 |" in (tmp_path / "objective.md").read_text()
    assert json.loads((tmp_path / "objective.json").read_text())["recipe"]["objective_weight"] == 0.01


def test_the_logged_epoch_value_is_the_batch_weighted_mean_of_the_steps_terms() -> None:
    import lightning as L

    from crate.lit import DigitsDataModule

    torch.manual_seed(0)
    module = ImageClassifier("crate_nano_patch4_32", in_chans=1, img_size=16, warmup_epochs=0, objective_weight=0.01)
    steps: list[tuple[float, int]] = []
    term, with_term = module.layer_objective.term, module._with_layer_objective

    def recorded_term() -> torch.Tensor:
        value = term()
        steps.append((float(value.detach()), 0))
        return value

    def recorded_with_term(loss: torch.Tensor, batch_size: int) -> torch.Tensor:
        out = with_term(loss, batch_size)
        steps[-1] = (steps[-1][0], batch_size)
        return out

    module.layer_objective.term, module._with_layer_objective = recorded_term, recorded_with_term
    trainer = L.Trainer(
        max_epochs=1, limit_val_batches=0, logger=False, enable_checkpointing=False, enable_progress_bar=False
    )
    trainer.fit(module, DigitsDataModule(img_size=16, batch_size=600))
    sizes = [size for _, size in steps]
    assert len(steps) >= 2 and len(set(sizes)) == 2  # full batches and a smaller last one: the weights matter
    expected = sum(value * size for value, size in steps) / sum(sizes)
    logged = float(trainer.callback_metrics["train/layer_objective"])
    assert logged == pytest.approx(expected, rel=1e-5)
