"""The shipped CIFAR-10 weights: load offline by tag, carry the normalisation they were trained with, match
their card; where CIFAR-10 is on this machine (data/cifar10), timm's own eval transform from the tag's cfg
reproduces the card's accuracy (skipped elsewhere: the tests never need the dataset). The same for the shipped
encoders (no classifier): their card's k-NN accuracy, against a k-NN written out again here."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from timm.data import create_transform, resolve_data_config
from torchvision import datasets

import crate  # noqa: F401
from crate.models import read_checkpoint
from crate.models.shipped import CIFAR10_CLASSES
from crate.run import read_record

REPO = Path(__file__).resolve().parents[1]


def _trained_on_all_of_cifar10(card: Path) -> bool:
    """A classifier's card whose run trained on data/cifar10 (not a subset's folder, not an encoder)."""
    recorded = json.loads(card.read_text())
    return recorded["num_classes"] == 10 and recorded["data_config"]["init_args"]["root"] == "data/cifar10"


# every tag of a classifier trained on CIFAR-10's train split: "<arch>.cifar10" and other recipes' "<arch>.cifar10_*"
SHIPPED = sorted(p.stem for p in (REPO / "checkpoints").glob("*.cifar10*.json") if _trained_on_all_of_cifar10(p))
DATA = REPO / "data" / "cifar10" / "val"
TEST_DATA = REPO / "data" / "cifar10" / "test"


@pytest.mark.parametrize("tag", SHIPPED)
def test_cifar10_tag_loads_offline_with_its_training_normalisation_and_card(tag: str) -> None:
    model = timm.create_model(tag, pretrained=True).eval()
    cfg = model.pretrained_cfg
    held = read_checkpoint(cfg["file"])
    recorded = read_record(held).data_config
    assert recorded["class_path"].endswith("StoredImageFolderDataModule")
    assert cfg["input_size"] == (3, 32, 32) and cfg["crop_pct"] == 1.0 and tuple(cfg["label_names"]) == CIFAR10_CLASSES
    # the store path normalised with the model's cfg mean and std, which the tag's cfg keeps
    assert tuple(cfg["mean"]) == tuple(timm.create_model(tag.split(".")[0]).pretrained_cfg["mean"])
    card = json.loads((REPO / "checkpoints" / f"{tag}.json").read_text())
    assert hashlib.sha256((REPO / "checkpoints" / card["file"]).read_bytes()).hexdigest() == card["sha256"]
    assert model(torch.zeros(1, 3, 32, 32)).shape == (1, 10)


def _timm_accuracy(tag: str, folder: Path) -> tuple[int, int]:
    """Correct predictions and images of ``folder`` through ``timm.create_model(tag, pretrained=True)`` and the
    evaluation transform its data config gives."""
    model = timm.create_model(tag, pretrained=True).eval()
    transform = create_transform(**resolve_data_config({}, model=model))
    images = datasets.ImageFolder(str(folder), transform=transform)
    correct = 0
    with torch.no_grad():
        for batch, labels in torch.utils.data.DataLoader(images, batch_size=500):
            correct += int((model(batch).argmax(1) == labels).sum())
    return correct, len(images)


@pytest.mark.skipif(not DATA.is_dir(), reason="CIFAR-10 is not on this machine (make cifar10-data)")
@pytest.mark.parametrize("tag", SHIPPED)
def test_timm_s_eval_transform_reproduces_the_card_s_accuracy(tag: str) -> None:
    correct, images = _timm_accuracy(tag, DATA)
    card = json.loads((REPO / "checkpoints" / f"{tag}.json").read_text())
    assert correct / images == pytest.approx(card["val_accuracy"], abs=1e-9)


@pytest.mark.skipif(not TEST_DATA.is_dir(), reason="CIFAR-10's test split is not on this machine (make cifar10-data)")
@pytest.mark.parametrize("tag", SHIPPED)
def test_timm_s_eval_transform_reproduces_the_card_s_test_accuracy(tag: str) -> None:
    """The test figure a card publishes (scored once, after the tag was chosen on val) is what a user gets."""
    card = json.loads((REPO / "checkpoints" / f"{tag}.json").read_text())
    correct, images = _timm_accuracy(tag, TEST_DATA)
    assert images == card["test_images"] == 10_000
    assert correct / images == pytest.approx(card["test_accuracy"], abs=1e-9)


ENCODERS = sorted(p.name[: -len(".safetensors")] for p in (REPO / "checkpoints").glob("*.cifar10_simdino.safetensors"))


@pytest.mark.parametrize("tag", ENCODERS)
def test_an_encoder_tag_loads_offline_without_a_classifier_and_matches_its_card(tag: str) -> None:
    model = timm.create_model(tag, pretrained=True).eval()
    cfg = model.pretrained_cfg
    card = json.loads((REPO / "checkpoints" / f"{tag}.json").read_text())
    assert hashlib.sha256((REPO / "checkpoints" / card["file"]).read_bytes()).hexdigest() == card["sha256"]
    assert cfg["num_classes"] == 0 and cfg["input_size"] == (3, 32, 32) and cfg["crop_pct"] == 1.0
    assert model(torch.zeros(2, 3, 32, 32)).shape == (2, model.num_features) == (2, card["num_features"])
    scored = card["frozen_features"]
    # the bar, on the card: at least 10 points of k-NN above the same architecture at its random init
    assert scored["this file"]["knn_top1"] >= scored["random init (seed 0)"]["knn_top1"] + 0.10


def _features(model: torch.nn.Module, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    transform = create_transform(**resolve_data_config({}, model=model))
    folder = datasets.ImageFolder(str(DATA.parent / split), transform=transform)
    features, labels = [], []
    with torch.no_grad():
        for images, targets in torch.utils.data.DataLoader(folder, batch_size=500):
            features.append(model(images))
            labels.append(targets)
    return torch.cat(features), torch.cat(labels)


@pytest.mark.slow
@pytest.mark.skipif(not DATA.is_dir(), reason="CIFAR-10 is not on this machine (make cifar10-data)")
@pytest.mark.parametrize("tag", ENCODERS)
def test_timm_s_eval_transform_reproduces_the_encoder_card_s_k_nn(tag: str) -> None:
    """The bank is the train split, the features come through timm with the tag's own data config; the k-NN is
    scored again in float64 numpy (cosine similarity, the 20 nearest, exp(s / 0.07) votes)."""
    model = timm.create_model(tag, pretrained=True).eval()
    bank, bank_labels = _features(model, "train")
    queries, labels = _features(model, "val")
    bank = torch.nn.functional.normalize(bank.double(), dim=1)
    queries = torch.nn.functional.normalize(queries.double(), dim=1)
    correct = 0
    for start in range(0, len(queries), 500):
        similarity, index = (queries[start : start + 500] @ bank.T).topk(20, dim=1)
        votes = np.zeros((len(index), 10))
        for row, (near, weight) in enumerate(
            zip(bank_labels[index].numpy(), np.exp(similarity.numpy() / 0.07), strict=True)
        ):
            np.add.at(votes[row], near, weight)
        correct += int((votes.argmax(1) == labels[start : start + 500].numpy()).sum())
    card = json.loads((REPO / "checkpoints" / f"{tag}.json").read_text())
    assert correct / len(labels) == pytest.approx(card["frozen_features"]["this file"]["knn_top1"], abs=2e-4)
