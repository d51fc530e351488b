"""Evaluation splits shared among the processes of a distributed run: even shares, every image counted once.

A process's share is read here in one process by giving :func:`crate.data.process_shares.rank_and_world` the
rank and world size of a distributed run; ``tests/test_distributed.py`` runs two real processes."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch
from conftest import write_image_folder
from torch.utils.data import Dataset, Subset

import crate.data.process_shares as process_shares
from crate.data import PADDING_LABEL, EvaluationSampler, EvaluationShares, MultiCrop
from crate.lit import (
    DigitsDataModule,
    ImageClassifier,
    MaskedAutoencoder,
    SelfDistillation,
    StoredImageFolderDataModule,
)


class _Numbered(Dataset):
    """Image ``i`` is a tensor holding ``i``, its label ``i % 3``; ``batched`` adds a ``__getitems__`` that
    records each call."""

    def __init__(self, size: int, batched: bool = False) -> None:
        self.size, self.calls = size, []
        if batched:
            self.__getitems__ = self._getitems

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.tensor([float(index)]), torch.tensor(index % 3)

    def _getitems(self, indices: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        self.calls.append(list(indices))
        return [self[i] for i in indices]


def _share(monkeypatch, size: int, rank: int, world: int, batched: bool = False) -> list[tuple[float, int]]:
    monkeypatch.setattr(process_shares, "rank_and_world", lambda: (rank, world))
    sampler, shares = EvaluationSampler(size), EvaluationShares(_Numbered(size, batched))
    positions = list(sampler)
    assert len(positions) == len(sampler)
    return [(float(image), int(label)) for image, label in shares.__getitems__(positions)]


@pytest.mark.parametrize("size", [1, 5, 6, 7, 13])
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_shares_are_even_and_hold_every_image_once_beside_its_own_label(monkeypatch, size: int, world: int) -> None:
    shares = [_share(monkeypatch, size, rank, world) for rank in range(world)]
    assert {len(share) for share in shares} == {-(-size // world)}  # every process runs as many batches
    counted = sorted(image for share in shares for image, label in share if label != PADDING_LABEL)
    assert counted == [float(i) for i in range(size)]
    for share in shares:
        assert all(label == int(image) % 3 for image, label in share if label != PADDING_LABEL)
    padding = [image for share in shares for image, label in share if label == PADDING_LABEL]
    assert len(padding) == -(-size // world) * world - size and all(0 <= image < size for image in padding)


def test_one_process_reads_the_split_in_order_and_batched_reads_stay_batched(monkeypatch) -> None:
    assert _share(monkeypatch, 7, 0, 1) == [(float(i), i % 3) for i in range(7)]
    monkeypatch.setattr(process_shares, "rank_and_world", lambda: (1, 3))
    split = _Numbered(7, batched=True)
    items = EvaluationShares(split).__getitems__(list(EvaluationSampler(7)))
    assert split.calls == [[1, 4, 0]]  # position 7 is a copy of image 0
    assert [int(label) for _, label in items] == [1, 1, PADDING_LABEL] and items[2][1].dtype == torch.int64


def _validate(module: L.LightningModule, data: L.LightningDataModule) -> dict[str, float]:
    trainer = L.Trainer(
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    return {key: float(value) for key, value in trainer.validate(module, datamodule=data, verbose=False)[0].items()}


def _share_and_subset(monkeypatch, build, rank: int, world: int) -> tuple[dict[str, float], dict[str, float]]:
    """Validation of one module on process ``rank``'s share of ``world`` (with its padding image), and on a split
    that is exactly the share's own images (one process)."""
    module, data = build()
    data.setup("validate")
    size = len(data.val_set)
    assert (size - rank) % world == 0, "the share must end on a padding position"
    monkeypatch.setattr(process_shares, "rank_and_world", lambda: (rank, world))
    shared = _validate(module, data)
    monkeypatch.setattr(process_shares, "rank_and_world", lambda: (0, 1))
    data.val_set = Subset(data.val_set, list(range(rank, size, world)))
    return shared, _validate(module, data)


def _classifier() -> tuple[L.LightningModule, L.LightningDataModule]:
    torch.manual_seed(0)
    module = ImageClassifier("crate_nano_patch4_32", num_classes=10, in_chans=1, img_size=16, model_kwargs={"depth": 1})
    return module, DigitsDataModule(img_size=16, batch_size=32, val_fraction=0.205)  # 369 validation images


def _masked_autoencoder() -> tuple[L.LightningModule, L.LightningDataModule]:
    torch.manual_seed(0)
    module = MaskedAutoencoder("crate_mae_nano_patch4_32", in_chans=1, img_size=16, model_kwargs={"depth": 1})
    return module, DigitsDataModule(img_size=16, batch_size=32, val_fraction=0.205)


def test_a_classifier_s_share_counts_its_own_images_once(monkeypatch) -> None:
    shared, subset = _share_and_subset(monkeypatch, _classifier, rank=1, world=2)
    assert shared["val/acc"] == subset["val/acc"]
    assert shared["val/loss"] == pytest.approx(subset["val/loss"], rel=1e-6)


def test_a_masked_autoencoder_s_loss_is_the_same_on_any_number_of_processes_and_at_any_batch_size(
    monkeypatch,
) -> None:
    """Each image is masked by its position in the split: two processes' shares (one of them with a padding
    copy), weighed by the images each counted, and a batch of 7 instead of 32 give the loss of one process."""
    module, data = _masked_autoencoder()
    data.setup("validate")
    size = len(data.val_set)  # 369: the second process's share ends on a padding copy
    whole = _validate(module, data)["val/loss"]
    shares = []
    for rank in range(2):
        monkeypatch.setattr(process_shares, "rank_and_world", lambda rank=rank: (rank, 2))
        shares.append((len(range(rank, size, 2)), _validate(module, data)["val/loss"]))
    assert sum(count * loss for count, loss in shares) / size == pytest.approx(whole, rel=1e-5)
    monkeypatch.setattr(process_shares, "rank_and_world", lambda: (0, 1))
    data.batch_size = 7
    assert _validate(module, data)["val/loss"] == pytest.approx(whole, rel=1e-5)
    # each image's loss, masked by its own position's noise, averaged over the split
    images = torch.stack([data.val_set[i][0] for i in range(size)])
    noise = torch.stack([torch.rand(16, generator=torch.Generator().manual_seed(i)) for i in range(size)])
    module.eval()
    with torch.no_grad():
        direct = float(module.model.forward_mae(images, noise=noise)[0])
    assert direct == pytest.approx(whole, rel=1e-5)


def test_self_distillation_s_k_nn_counts_its_own_images_once(monkeypatch, tmp_path: Path) -> None:
    root = write_image_folder(tmp_path / "images", ("a", "b"), 8, val_per_class=10, size=32, gray=False)

    def build() -> tuple[L.LightningModule, L.LightningDataModule]:
        torch.manual_seed(0)
        module = SelfDistillation(
            "crate_nano_patch4_32", num_classes=2, img_size=32, model_kwargs={"depth": 1}, warmup_epochs=0,
            head_hidden_dim=32, head_dim=16, knn_bank=16, knn_k=3,
        )  # fmt: skip
        data = StoredImageFolderDataModule(str(root), batch_size=4, multi_crop=MultiCrop(global_crops=2, local_crops=2))
        return module, data

    shared, subset = _share_and_subset(monkeypatch, build, rank=2, world=3)  # 20 images: a share of 6 and 1 padding
    assert shared["val/knn_acc"] == subset["val/knn_acc"]


def test_a_padding_copy_keeps_every_entry_but_the_label(monkeypatch) -> None:
    """Items of more entries (an encoded file's bytes, label and path) keep their image and path."""

    class Files(Dataset):
        def __len__(self) -> int:
            return 3

        def __getitem__(self, index: int) -> tuple[bytes, int, str]:
            return bytes([index]), index, f"{index}.jpg"

    monkeypatch.setattr(process_shares, "rank_and_world", lambda: (1, 2))
    items = EvaluationShares(Files()).__getitems__(list(EvaluationSampler(3)))
    assert items == [(bytes([1]), 1, "1.jpg"), (bytes([0]), PADDING_LABEL, "0.jpg")]


def test_a_share_of_padding_only_still_logs_the_masked_autoencoder_s_loss(monkeypatch, tmp_path: Path) -> None:
    """3 validation images on 4 processes: the fourth process reads one padding copy. It must still log val/loss
    (with no weight), since Lightning syncs every key a process logged with every other process at the end."""
    root = write_image_folder(tmp_path / "images", ("a", "b", "c"), 2, val_per_class=1, size=32, gray=False)
    torch.manual_seed(0)
    module = MaskedAutoencoder("crate_mae_nano_patch4_32", img_size=32, model_kwargs={"depth": 1})
    data = StoredImageFolderDataModule(str(root), batch_size=4)
    monkeypatch.setattr(process_shares, "rank_and_world", lambda: (3, 4))
    logged = []
    log = module.log
    monkeypatch.setattr(
        module, "log", lambda name, value, **kw: (logged.append((name, value, kw)), log(name, value, **kw))
    )
    _validate(module, data)
    losses = [(float(value), kw["batch_size"]) for name, value, kw in logged if name == "val/loss"]
    assert losses == [(0.0, 0)]  # logged, finite, and with no weight in the mean over processes
