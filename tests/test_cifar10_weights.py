"""The shipped CIFAR-10 weights: load offline by tag, carry the normalisation they were trained with, match
their card; where CIFAR-10 is on this machine (data/cifar10), timm's own eval transform from the tag's cfg
reproduces the card's accuracy (skipped elsewhere: the tests never need the dataset)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import timm
import torch
from timm.data import create_transform, resolve_data_config
from torchvision import datasets

import crate  # noqa: F401
from crate.models import read_checkpoint
from crate.models.shipped import CIFAR10_CLASSES

REPO = Path(__file__).resolve().parents[1]
SHIPPED = sorted(p.name[: -len(".safetensors")] for p in (REPO / "checkpoints").glob("*.cifar10.safetensors"))
DATA = REPO / "data" / "cifar10" / "val"


@pytest.mark.parametrize("tag", SHIPPED)
def test_cifar10_tag_loads_offline_with_its_training_normalisation_and_card(tag: str) -> None:
    model = timm.create_model(tag, pretrained=True).eval()
    cfg = model.pretrained_cfg
    held = read_checkpoint(cfg["file"])
    recorded = held.data_config
    assert recorded["class_path"].endswith("StoredImageFolderDataModule")
    assert cfg["input_size"] == (3, 32, 32) and cfg["crop_pct"] == 1.0 and tuple(cfg["label_names"]) == CIFAR10_CLASSES
    # the store path normalised with the model's cfg mean and std, which the tag's cfg keeps
    assert tuple(cfg["mean"]) == tuple(timm.create_model(tag.split(".")[0]).pretrained_cfg["mean"])
    card = json.loads((REPO / "checkpoints" / f"{tag}.json").read_text())
    assert hashlib.sha256((REPO / "checkpoints" / card["file"]).read_bytes()).hexdigest() == card["sha256"]
    assert model(torch.zeros(1, 3, 32, 32)).shape == (1, 10)


@pytest.mark.skipif(not DATA.is_dir(), reason="CIFAR-10 is not on this machine (make cifar10-data)")
@pytest.mark.parametrize("tag", SHIPPED)
def test_timm_s_eval_transform_reproduces_the_card_s_accuracy(tag: str) -> None:
    model = timm.create_model(tag, pretrained=True).eval()
    transform = create_transform(**resolve_data_config({}, model=model))
    folder = datasets.ImageFolder(str(DATA), transform=transform)
    loader = torch.utils.data.DataLoader(folder, batch_size=500)
    correct = 0
    with torch.no_grad():
        for images, labels in loader:
            correct += int((model(images).argmax(1) == labels).sum())
    card = json.loads((REPO / "checkpoints" / f"{tag}.json").read_text())
    assert correct / len(folder) == pytest.approx(card["val_accuracy"], abs=1e-9)
