"""Fixed-shape evaluation batches: a split's last batch padded to the batch size, the padding left out of
val/acc and val/loss."""

from __future__ import annotations

import lightning as L
import numpy as np
import torch
from helpers import cifar_arrays

from crate.data import PADDING_LABEL, pad_batch
from crate.lit import ImageClassifier
from crate.lit.data import CIFARDataModule


def test_pad_batch_repeats_the_first_image_with_the_padding_label() -> None:
    images, labels = torch.arange(24.0).reshape(3, 2, 2, 2), torch.tensor([1, 0, 2])
    padded, padded_labels = pad_batch(images, labels, 5)
    assert padded.shape == (5, 2, 2, 2)
    assert torch.equal(padded[:3], images) and torch.equal(padded[3], images[0]) and torch.equal(padded[4], images[0])
    assert padded_labels.tolist() == [1, 0, 2, PADDING_LABEL, PADDING_LABEL]
    assert pad_batch(images, labels, 3)[0] is images  # a full batch is left alone


def _validate(monkeypatch, fixed: bool) -> tuple[dict[str, float], list[int], ImageClassifier, CIFARDataModule]:
    arrays = cifar_arrays(seed=3, train_size=16, test_size=21)  # 21 = 2 batches of 8 and one of 5
    monkeypatch.setattr(CIFARDataModule, "_open", lambda self, train, download: arrays[train])
    data = CIFARDataModule(download=False, batch_size=8, fixed_eval_shape=fixed)
    torch.manual_seed(0)
    module = ImageClassifier("crate_nano_patch4_32", num_classes=10, model_kwargs={"depth": 1})
    shapes: list[int] = []
    module.model.register_forward_pre_hook(lambda _, args: shapes.append(len(args[0])))
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False)
    metrics = trainer.validate(module, datamodule=data, verbose=False)[0]
    return metrics, shapes, module, data


def test_padded_validation_has_one_shape_and_the_unpadded_numbers(monkeypatch) -> None:
    plain, plain_shapes, module, data = _validate(monkeypatch, fixed=False)
    fixed, fixed_shapes, _, _ = _validate(monkeypatch, fixed=True)
    assert plain_shapes == [8, 8, 5] and fixed_shapes == [8, 8, 8]
    # independently: the model's logits on the 21 images, accuracy and cross-entropy in float64 numpy (val/loss is
    # the plain cross-entropy whatever the run's label smoothing)
    images, labels = zip(*[data.val_set[i] for i in range(len(data.val_set))], strict=True)
    with torch.no_grad():
        logits = module.model.eval()(torch.stack(images)).double().numpy()
    labels = np.array([int(label) for label in labels])
    log_p = logits - logits.max(1, keepdims=True)
    log_p = log_p - np.log(np.exp(log_p).sum(1, keepdims=True))
    loss = -log_p[np.arange(21), labels].mean()
    accuracy = (logits.argmax(1) == labels).mean()
    for metrics in (plain, fixed):
        assert metrics["val/acc"] == np.float32(accuracy)
        assert abs(metrics["val/loss"] - loss) < 1e-5
