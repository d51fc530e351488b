"""Every family through the one checkpoint door: ViT twins like CRATE, one num_classes rule, input-channel
adaptation of pretrained weights, and CRATE-alpha's initial distribution."""

from __future__ import annotations

import math
from pathlib import Path

import lightning as L
import pytest
import timm
import torch

import crate  # noqa: F401
from crate.data.digits import load_digits_tensors
from crate.interpret import load_model
from crate.interpret.loading import held_out_accuracy
from crate.lit import DigitsDataModule, ImageClassifier
from crate.models import CheckpointError, read_checkpoint
from crate.models.shipped import shipped_checkpoint

REPO = Path(__file__).resolve().parents[1]
FAMILIES = ["crate_nano_patch4_32", "crate_alpha_nano_patch4_32", "vit_nano_patch4_32"]


def _lightning_checkpoint(name: str, path: Path) -> ImageClassifier:
    torch.manual_seed(4)
    module = ImageClassifier(name, num_classes=10, in_chans=1, img_size=32)
    trainer = L.Trainer(
        max_steps=1, limit_val_batches=1, logger=False, enable_checkpointing=False, enable_progress_bar=False
    )
    trainer.fit(module, DigitsDataModule(batch_size=8))
    trainer.save_checkpoint(path)
    return module.eval()


def test_a_vit_twin_trained_with_train_py_loads_back_through_timm_and_interpret(tmp_path: Path) -> None:
    module = _lightning_checkpoint("vit_nano_patch4_32", tmp_path / "vit.ckpt")
    overlay = dict(file=str(tmp_path / "vit.ckpt"))
    loaded = timm.create_model(
        "vit_nano_patch4_32", pretrained=True, num_classes=10, in_chans=1, pretrained_cfg_overlay=overlay
    ).eval()
    x = torch.randn(3, 1, 32, 32)
    with torch.no_grad():
        assert (loaded(x) - module(x)).abs().max().item() == 0.0
        assert (load_model("vit_nano_patch4_32", tmp_path / "vit.ckpt")(x) - module(x)).abs().max().item() == 0.0
    with pytest.raises(CheckpointError, match=r"holds vit_nano_patch4_32.*does not fit crate_nano_patch4_32"):
        timm.create_model("crate_nano_patch4_32", pretrained=True, num_classes=10, pretrained_cfg_overlay=overlay)


@pytest.mark.parametrize("name", FAMILIES)
def test_num_classes_with_a_file_means_the_file_has_that_many_for_every_family(name: str) -> None:
    overlay = dict(file=shipped_checkpoint(f"{name}.digits.safetensors"))
    model = timm.create_model(name, pretrained=True, num_classes=10, in_chans=1, pretrained_cfg_overlay=overlay)
    card = (REPO / "checkpoints" / f"{name}.digits.json").read_text()
    accuracy = held_out_accuracy(model, load_digits_tensors(32, 1)[1])
    assert f'"val_accuracy": {accuracy}' in card  # the shipped weights, not a fresh head
    with pytest.raises(CheckpointError, match=r"head has 10 classes.*num_classes=3"):
        timm.create_model(name, pretrained=True, num_classes=3, in_chans=1, pretrained_cfg_overlay=overlay)
    reset = timm.create_model(
        name, pretrained=True, num_classes=3, in_chans=1, pretrained_cfg_overlay=dict(overlay, num_classes=10)
    )
    assert reset.get_classifier().out_features == 3


@pytest.mark.parametrize("name", FAMILIES)
def test_pretrained_grayscale_weights_adapt_to_three_channels(name: str) -> None:
    gray = timm.create_model(f"{name}.digits", pretrained=True).eval()
    rgb = timm.create_model(f"{name}.digits", pretrained=True, in_chans=3).eval()
    assert rgb.patch_embed.proj.weight.shape != gray.patch_embed.proj.weight.shape
    images = load_digits_tensors(32, 1)[1].images[:16]
    with torch.no_grad():
        # gray images replicated to three channels give the grayscale model's outputs
        torch.testing.assert_close(rgb(images.expand(-1, 3, -1, -1)), gray(images), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", ["crate_nano_patch4_32", "crate_alpha_nano_patch4_32", "vit_nano_patch4_32"])
def test_colour_weights_built_gray_give_the_colour_model_s_outputs_on_gray_images(name: str, tmp_path: Path) -> None:
    """RGB -> gray for a flat patch embedding that normalises its patches first (CRATE's ``norm_in``): the
    weights were summed and the LayerNorm's per-pixel scales averaged over the channels, another function
    wherever the channels' scales differ (on CIFAR-10's val images made gray, the shipped crate_nano's gray build
    agreed with its colour build on 69% of the predictions). The scales and shifts now fold into the projection
    exactly; a model without ``norm_in`` keeps timm's sum. The file's scales are drawn apart per channel here,
    so that averaging them could not pass."""
    torch.manual_seed(0)
    colour = timm.create_model(name, num_classes=10).eval()
    state = colour.state_dict()
    for key in ("patch_embed.norm_in.weight", "patch_embed.norm_in.bias"):
        if key in state:
            state[key] = torch.randn_like(state[key])
    colour.load_state_dict(state)
    torch.save(state, tmp_path / "colour.pth")
    with pytest.warns(UserWarning, match="in_chans=1"):
        gray = timm.create_model(
            name,
            pretrained=True,
            num_classes=10,
            in_chans=1,
            pretrained_cfg_overlay=dict(file=str(tmp_path / "colour.pth")),
        ).eval()
    images = torch.randn(4, 1, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(gray(images), colour(images.expand(-1, 3, -1, -1)), atol=1e-4, rtol=1e-4)


def test_a_grayscale_tost_file_adapts_its_conv_stem_to_three_channels(tmp_path: Path) -> None:
    # ToST's first layer is the first conv of its stem (cfg first_conv "patch_embed.proj.0.0")
    torch.manual_seed(0)
    gray = timm.create_model("tost_nano_patch4_32", num_classes=10, in_chans=1).eval()
    torch.save(gray.state_dict(), tmp_path / "tost_gray.pth")
    overlay = dict(file=str(tmp_path / "tost_gray.pth"))
    # a file is built as trained unless the call asks for other channels; then it is adapted, with a warning
    assert timm.create_model("tost_nano_patch4_32", pretrained=True, pretrained_cfg_overlay=overlay).in_chans == 1
    with pytest.warns(UserWarning, match="trained with in_chans=1; building tost_nano_patch4_32 with in_chans=3"):
        rgb = timm.create_model(
            "tost_nano_patch4_32", pretrained=True, num_classes=10, in_chans=3, pretrained_cfg_overlay=overlay
        )
    assert (
        rgb.patch_embed.proj[0][0].weight.shape[1] == 3
        and read_checkpoint(overlay["file"]).in_chans(first_conv="patch_embed.proj.0.0") == 1
    )
    images = torch.randn(4, 1, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(rgb.eval()(images.expand(-1, 3, -1, -1)), gray(images), atol=1e-4, rtol=1e-4)


def test_a_file_missing_layers_names_them_in_one_clean_sentence(tmp_path: Path) -> None:
    state = timm.create_model("crate_nano_patch4_32", num_classes=10).state_dict()
    del state["blocks.3.ista.weight"]
    torch.save(state, tmp_path / "partial.pth")
    overlay = dict(file=str(tmp_path / "partial.pth"))
    with pytest.raises(CheckpointError) as refused:
        timm.create_model("crate_nano_patch4_32", pretrained=True, num_classes=10, pretrained_cfg_overlay=overlay)
    assert "(crate_nano_patch4_32): missing ['blocks.3.ista.weight']. Was it" in str(refused.value)


def test_read_checkpoint_says_what_a_file_holds() -> None:
    checkpoint = read_checkpoint(shipped_checkpoint("crate_alpha_nano_patch4_32.digits.safetensors"))
    assert checkpoint.model_name == "crate_alpha_nano_patch4_32"
    assert checkpoint.num_classes == 10 and checkpoint.in_chans() == 1
    assert "width 96, 4 layers, 10 classes" in checkpoint.describe()


def test_a_safetensors_file_under_another_name_is_read_as_safetensors(tmp_path: Path) -> None:
    """Hub mirrors and users rename files; the format is told by its bytes, so a renamed export is neither
    called corrupt nor loaded into another model."""
    from safetensors.torch import load_file

    original = shipped_checkpoint("crate_nano_patch4_32.cifar10.safetensors")
    renamed = tmp_path / "weights.bin"
    renamed.write_bytes(Path(original).read_bytes())
    checkpoint = read_checkpoint(renamed)
    assert checkpoint.source == "safetensors" and checkpoint.model_name == "crate_nano_patch4_32"
    reference = load_file(str(original))
    assert checkpoint.zoo_state_dict.keys() == reference.keys()
    assert all(torch.equal(checkpoint.zoo_state_dict[k], reference[k]) for k in reference)
    overlay = dict(file=str(renamed), num_classes=10)
    with pytest.raises(CheckpointError, match="holds crate_nano_patch4_32, width 96, 4 layers"):
        timm.create_model("crate_micro_patch4_32", pretrained=True, num_classes=10, pretrained_cfg_overlay=overlay)


def test_crate_alpha_starts_from_the_authors_initial_distribution() -> None:
    torch.manual_seed(0)
    model = timm.create_model("crate_alpha_base_patch16_224", num_classes=1000)
    d = 768
    for dictionary in (model.blocks[0].ista.dictionary, model.blocks[5].ista.output_dictionary):
        bound = math.sqrt(6 / d)  # kaiming-uniform with fan_in = d: U(-sqrt(6/d), sqrt(6/d))
        assert dictionary.abs().max().item() <= bound
        assert dictionary.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.01)
    for weight in (model.blocks[3].attn.qkv.weight, model.blocks[3].attn.proj.weight, model.head.weight):
        assert weight.std().item() == pytest.approx(0.02, rel=0.02)
    assert model.pos_embed.std().item() == pytest.approx(0.02, rel=0.02)
    assert model.cls_token.abs().max().item() < 1e-5
    fan_in = 3 * 16 * 16
    assert model.patch_embed.proj.weight.abs().max().item() <= math.sqrt(6 / fan_in)
    assert model.patch_embed.proj.weight.std().item() == pytest.approx(math.sqrt(2 / fan_in), rel=0.02)
    assert model.head.bias.abs().max().item() == 0.0 and model.patch_embed.proj.bias.abs().max().item() == 0.0
