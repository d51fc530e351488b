"""Mixup and CutMix on the device, against their definitions: lam follows Beta(alpha, alpha) (Kolmogorov-Smirnov
against scipy), each mixed image is timm's formula computed in float64 numpy from the same draws (CutMix's box a
transcription of timm's rand_bbox), each image's draws depend on its own seed only, the loss equals timm's soft-target
cross-entropy of its mixed targets, and a batch costs the same operations whatever its draws."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import OpCounter, write_image_folder
from scipy import stats

from crate.data import BatchMixing, MixedBatch
from crate.data.batch_augmentation import sample_uniforms
from crate.data.batch_mixing import MIX_SALT
from crate.lit.mixed_loss import mixed_loss

SEEDS = torch.arange(1000, 1016)


def _images(batch: int = 16, side: int = 8) -> torch.Tensor:
    return torch.randn(batch, 3, side, side, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("alpha", [0.2, 0.8, 1.0])
def test_lam_follows_its_beta_distribution(alpha: float) -> None:
    mixing = BatchMixing(mixup_alpha=alpha, cutmix_alpha=0.0)
    lam = mixing.draws(torch.arange(20_000), 32, 32)["lam"].numpy()
    result = stats.kstest(lam, stats.beta(alpha, alpha).cdf)
    assert result.statistic < 0.012, result  # 20,000 draws: 0.0096 is the 5% critical value


def test_mixup_is_its_formula_in_float64() -> None:
    mixing = BatchMixing(mixup_alpha=0.8, cutmix_alpha=0.0, prob=0.7)
    x = _images()
    out, lam = mixing(x, SEEDS)
    u = sample_uniforms(SEEDS ^ MIX_SALT).numpy()
    drawn = stats.beta(0.8, 0.8).ppf(u[:, 2])
    xs = x.double().numpy()
    for i in range(len(x)):
        if u[i, 0] < 0.7:
            assert abs(float(lam[i]) - drawn[i]) < 2e-4  # the table's interpolation
            expected = float(lam[i]) * xs[i] + (1 - float(lam[i])) * xs[len(x) - 1 - i]
        else:
            assert float(lam[i]) == 1.0
            expected = xs[i]
        np.testing.assert_allclose(out[i].double().numpy(), expected, atol=1e-5)
    assert 0 < int((u[:, 0] < 0.7).sum()) < len(x)  # both kinds of image are in the batch


def _rand_bbox(height: int, width: int, lam: float, u_y: float, u_x: float) -> tuple[int, int, int, int]:
    """timm's rand_bbox (no margin), with the centre drawn from the given uniforms."""
    ratio = np.sqrt(1 - lam)
    cut_h, cut_w = int(height * ratio), int(width * ratio)
    cy, cx = int(u_y * height), int(u_x * width)
    return (
        int(np.clip(cy - cut_h // 2, 0, height)),
        int(np.clip(cy + cut_h // 2, 0, height)),
        int(np.clip(cx - cut_w // 2, 0, width)),
        int(np.clip(cx + cut_w // 2, 0, width)),
    )


def test_cutmix_pastes_timm_s_box_from_the_partner_and_corrects_lam() -> None:
    mixing = BatchMixing(mixup_alpha=0.0, cutmix_alpha=1.0)
    x = _images(side=12)
    out, lam = mixing(x, SEEDS)
    u = sample_uniforms(SEEDS ^ MIX_SALT).numpy()
    xs = x.numpy()
    pasted = 0
    for i in range(len(x)):
        drawn = stats.beta(1.0, 1.0).ppf(u[i, 2])  # the uniform itself
        y0, y1, x0, x1 = _rand_bbox(12, 12, drawn, u[i, 3], u[i, 4])
        expected = xs[i].copy()
        expected[:, y0:y1, x0:x1] = xs[len(x) - 1 - i][:, y0:y1, x0:x1]
        np.testing.assert_array_equal(out[i].numpy(), expected)
        assert float(lam[i]) == pytest.approx(1 - (y1 - y0) * (x1 - x0) / 144, abs=1e-6)
        pasted += (y1 - y0) * (x1 - x0) > 0
    assert pasted > len(x) // 2


def test_each_image_s_draws_are_its_own_seed_s_and_both_kinds_occur() -> None:
    mixing = BatchMixing(mixup_alpha=0.8, cutmix_alpha=1.0, switch_prob=0.5)
    whole = mixing.draws(SEEDS, 32, 32)
    part = mixing.draws(SEEDS[[7, 2, 11]], 32, 32)
    for key in whole:
        assert torch.equal(part[key], whole[key][[7, 2, 11]])
    kinds = mixing.draws(torch.arange(2000), 32, 32)["kind"]
    assert abs(float((kinds == 2).double().mean()) - 0.5) < 0.05 and int((kinds == 0).sum()) == 0


def test_the_loss_is_timm_s_soft_target_cross_entropy_of_the_mixed_targets() -> None:
    from timm.data.mixup import mixup_target
    from timm.loss import SoftTargetCrossEntropy

    logits = torch.randn(16, 10, generator=torch.Generator().manual_seed(1))
    targets = torch.randint(0, 10, (16,), generator=torch.Generator().manual_seed(2))
    lam = torch.rand(16, generator=torch.Generator().manual_seed(3))
    soft = mixup_target(targets, 10, lam=lam[:, None], smoothing=0.1)  # timm's elementwise targets
    expected = SoftTargetCrossEntropy()(logits, soft)
    torch.testing.assert_close(mixed_loss(logits, targets, lam, label_smoothing=0.1), expected)


def test_a_batch_costs_the_same_operations_whatever_its_draws() -> None:
    mixing = BatchMixing()
    counts = []
    for seeds in (SEEDS, SEEDS + 7_777, torch.full((16,), 3)):
        with OpCounter() as counter:
            mixing(_images(), seeds)
        counts.append(counter.ops)
    assert counts[0] == counts[1] == counts[2]


def test_mixing_settings_are_checked_and_switch_off_after_their_epochs() -> None:
    with pytest.raises(ValueError, match="prob must lie in"):
        BatchMixing(prob=1.5)
    with pytest.raises(ValueError, match=">= 0"):
        BatchMixing(mixup_alpha=-1)
    mixing = BatchMixing(epochs=3)
    assert mixing.on(2) and not mixing.on(3)
    assert not BatchMixing(mixup_alpha=0, cutmix_alpha=0).on(0)


def test_a_recipe_sets_mixing_on_the_store_path_and_the_classifier_trains_on_mixed_batches(tmp_path) -> None:
    from conftest import REPO

    from crate.lit import cli_main

    write_image_folder(tmp_path / "images", 4, per_class=4, size=32, suffix=".png", gray=False, seed=1)
    args = ["--config", str(REPO / "configs" / "cifar10.yaml"), "--data.root", str(tmp_path / "images")]
    args += ["--data.init_args.mixing.mixup_alpha", "0.8", "--data.init_args.mixing.epochs", "5"]
    args += ["--model.model_name", "crate_nano_patch4_32", "--log_root", str(tmp_path / "logs")]
    cli = cli_main(args, run=False)
    assert cli.datamodule.mixing == BatchMixing(mixup_alpha=0.8, epochs=5)
    cli.datamodule.setup("fit")
    batch = cli.datamodule.on_after_batch_transfer(next(iter(cli.datamodule.train_dataloader())), 0)
    assert isinstance(batch, MixedBatch)  # the type the training step reads a mixed batch by
    images, labels, lam = batch
    assert images.shape[1:] == (3, 32, 32) and lam.shape == labels.shape and bool(((lam > 0) & (lam <= 1)).all())
    cli.model.log_training_step = lambda *args, **kwargs: None  # logging needs a trainer; the loss does not
    loss = cli.model.training_step(batch, 0)
    logits = cli.model(images)
    expected = mixed_loss(logits, labels, lam, cli.model.hparams.label_smoothing)
    assert torch.isfinite(loss) and float(loss) == pytest.approx(float(expected), rel=1e-5)


def _float64_weighted_mixed_loss(logits, targets, lam, weight) -> float:
    """A transcription in float64 numpy: sum_i (lam w[y_i] CE_i + (1 - lam) w[y_p] CE_p) / sum_i (lam w[y_i] +
    (1 - lam) w[y_p]), y_p the partner's label (the batch reversed)."""
    z = logits.double().numpy()
    log_p = z - z.max(1, keepdims=True) - np.log(np.exp(z - z.max(1, keepdims=True)).sum(1, keepdims=True))
    y, partner, lam, w = targets.numpy(), targets.flip(0).numpy(), lam.double().numpy(), weight.double().numpy()
    rows = np.arange(len(y))
    total = lam * w[y] * -log_p[rows, y] + (1 - lam) * w[partner] * -log_p[rows, partner]
    return float(total.sum() / (lam * w[y] + (1 - lam) * w[partner]).sum())


def test_class_weights_weigh_the_mixed_losses_as_cross_entropy_weighs_an_unmixed_batch() -> None:
    """With Mixup or CutMix on, a folder run's class weights (imbalanced classes) were dropped without a word: both
    mixed losses were unweighted. Each now weighs its terms by class, as the weighted cross-entropy does."""
    from timm.data.mixup import mixup_target
    from timm.loss import SoftTargetCrossEntropy

    from crate.lit.mixed_loss import weighted_soft_target_loss

    logits = torch.randn(16, 10, generator=torch.Generator().manual_seed(1))
    targets = torch.randint(0, 10, (16,), generator=torch.Generator().manual_seed(2))
    lam = torch.rand(16, generator=torch.Generator().manual_seed(3))
    weight = torch.rand(10, generator=torch.Generator().manual_seed(4)) * 3 + 0.1
    expected = _float64_weighted_mixed_loss(logits, targets, lam, weight)
    assert float(mixed_loss(logits, targets, lam, weight=weight)) == pytest.approx(expected, rel=1e-5)
    soft = mixup_target(targets, 10, lam=lam[:, None], smoothing=0.0)
    assert float(weighted_soft_target_loss(logits, soft, weight)) == pytest.approx(expected, rel=1e-5)
    assert abs(float(mixed_loss(logits, targets, lam)) - expected) > 1e-2  # unweighted: another number
    # unmixed (lam 1): torch's weighted cross-entropy, label smoothing included
    ones = torch.ones(16)
    torch.testing.assert_close(
        mixed_loss(logits, targets, ones, label_smoothing=0.1, weight=weight),
        torch.nn.functional.cross_entropy(logits, targets, weight=weight, label_smoothing=0.1),
    )
    # equal weights: timm's soft-target loss
    smoothed = mixup_target(targets, 10, lam=lam[:, None], smoothing=0.1)
    torch.testing.assert_close(
        weighted_soft_target_loss(logits, smoothed, torch.full((10,), 2.5)), SoftTargetCrossEntropy()(logits, smoothed)
    )


def test_mixup_set_by_the_model_and_by_the_data_is_refused_before_a_step(tmp_path) -> None:
    """The data's mixing takes the batches it mixes, so the model's mixup_alpha went unused without a word."""
    import lightning as L
    from lightning.pytorch.utilities.exceptions import MisconfigurationException

    from crate.lit import ImageClassifier, StoredImageFolderDataModule

    write_image_folder(tmp_path / "images", 4, per_class=4, size=32, suffix=".png", gray=False, seed=1)
    data = StoredImageFolderDataModule(str(tmp_path / "images"), batch_size=8, mixing=BatchMixing())
    module = ImageClassifier("crate_nano_patch4_32", num_classes=4, img_size=32, mixup_alpha=0.8)
    trainer = L.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    with pytest.raises(MisconfigurationException, match=r"set twice.*mixup_alpha.*mixing.*give one of them"):
        trainer.fit(module, data)
    assert trainer.global_step == 0
