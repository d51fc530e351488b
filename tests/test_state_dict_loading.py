"""``model.load_state_dict`` of the zoo's models, as timm's ``create_model(NAME, checkpoint_path=PATH)`` calls it:
the zoo's layouts load, and weights that do not fit the model as built are refused in one line naming the build
arguments that differ, never fitted to it (no position embedding resampled, no channels folded)."""

from __future__ import annotations

from pathlib import Path

import pytest
import timm
import torch

import crate  # noqa: F401
from crate.models import CheckpointError
from crate.models.state_dict_loading import StateDictMismatch

REPO = Path(__file__).resolve().parents[1]
DIGITS = REPO / "checkpoints" / "crate_nano_patch4_32.digits.safetensors"


def _outputs(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(x)


def test_checkpoint_path_loads_a_zoo_file_as_the_tag_does() -> None:
    x = torch.randn(3, 1, 32, 32, generator=torch.Generator().manual_seed(0))
    loaded = timm.create_model("crate_nano_patch4_32", checkpoint_path=str(DIGITS), in_chans=1, num_classes=10)
    tag = timm.create_model("crate_nano_patch4_32.digits", pretrained=True)
    assert torch.equal(_outputs(loaded, x), _outputs(tag, x))


def test_a_lightning_checkpoint_gives_its_moving_average_where_the_run_kept_one(tmp_path: Path) -> None:
    """A train.py checkpoint holds the module's weights under ``model.`` and, with EMA, the average under
    ``model_ema.module.``: the average is what the run validated and exported, so it is what loads."""
    torch.manual_seed(0)
    raw = timm.create_model("crate_nano_patch4_32", in_chans=1, num_classes=10, img_size=16)
    average = timm.create_model("crate_nano_patch4_32", in_chans=1, num_classes=10, img_size=16)
    state = {f"model.{k}": v for k, v in raw.state_dict().items()}
    torch.save({"epoch": 3, "state_dict": state}, tmp_path / "plain.ckpt")
    state.update({f"model_ema.module.{k}": v for k, v in average.state_dict().items()})
    torch.save({"epoch": 3, "state_dict": state}, tmp_path / "ema.ckpt")
    x = torch.randn(2, 1, 16, 16)
    for name, expected in (("plain", raw), ("ema", average)):
        model = timm.create_model(
            "crate_nano_patch4_32",
            checkpoint_path=str(tmp_path / f"{name}.ckpt"),
            in_chans=1,
            num_classes=10,
            img_size=16,
        )
        assert torch.equal(_outputs(model, x), _outputs(expected, x)), name


@pytest.mark.parametrize(
    ("name", "file", "kwargs", "named"),
    [
        ("crate_nano_patch4_32", DIGITS, {"in_chans": 1}, "build it with the weights' num_classes=10, or load"),
        ("crate_nano_patch4_32", DIGITS, {"num_classes": 10}, "build it with the weights' in_chans=1, or load"),
        ("crate_nano_patch4_32", DIGITS, {"num_classes": 10, "in_chans": 1, "img_size": 48}, "img_size=32, or load"),
        (
            "crate_cct4_3x2_32",
            REPO / "checkpoints" / "crate_cct4_3x2_32.cifar10.safetensors",
            {"in_chans": 1},
            "in_chans=3",
        ),
        ("crate_nano_patch4_32", REPO / "checkpoints" / "vit_nano_patch4_32.digits.safetensors", {}, "as built ("),
    ],
)
def test_weights_that_do_not_fit_the_model_as_built_are_refused_with_what_differs(
    name: str, file: Path, kwargs: dict, named: str
) -> None:
    with pytest.raises(StateDictMismatch) as refused:
        timm.create_model(name, checkpoint_path=str(file), **kwargs)
    message = str(refused.value)
    assert "\n" not in message and named in message
    assert f"timm.create_model({name!r}, pretrained=True, pretrained_cfg_overlay=dict(file=PATH))" in message
    assert isinstance(refused.value, RuntimeError) and isinstance(refused.value, CheckpointError)  # torch's type too


def test_a_non_strict_load_keeps_torch_s_contract() -> None:
    """``strict=False`` loads what fits and returns the keys that did not, as torch does (timm's head reset)."""
    weights = timm.create_model("crate_nano_patch4_32.digits", pretrained=True).state_dict()
    del weights["head.weight"], weights["head.bias"]
    model = timm.create_model("crate_nano_patch4_32", in_chans=1, num_classes=5)
    result = model.load_state_dict(weights, strict=False)
    assert sorted(result.missing_keys) == ["head.bias", "head.weight"] and not result.unexpected_keys
    assert torch.equal(model.state_dict()["pos_embed"], weights["pos_embed"])


def test_the_state_of_a_compiled_or_data_parallel_model_loads() -> None:
    """``torch.compile`` names its model's weights ``_orig_mod.*`` and DataParallel / DDP ``module.*``: the prefixes
    are the wrapper's, not the model's, and the weights load into a plain model."""
    tag = timm.create_model("crate_nano_patch4_32.digits", pretrained=True)
    x = torch.randn(2, 1, 32, 32)
    for wrapped in (torch.compile(tag), torch.nn.DataParallel(tag)):
        state = wrapped.state_dict()
        assert all(key.startswith(("_orig_mod.", "module.")) for key in state)
        model = timm.create_model("crate_nano_patch4_32", in_chans=1, num_classes=10)
        model.load_state_dict(state)
        assert torch.equal(_outputs(model, x), _outputs(tag, x))


def test_a_run_of_one_of_timm_s_own_models_loads_from_its_file_for_training_and_evaluation(tmp_path: Path) -> None:
    """A stock timm ViT trained by train.py: ``--model.pretrained_file`` and ``crate.interpret --checkpoint`` build
    it from the run's file (its moving average, its image statistics and input); timm's own loader read the file as
    it lies (``model.``-prefixed keys) and failed."""
    from crate.models import create_classifier
    from crate.run import build_model

    settings = {"patch_size": 4, "depth": 1}
    torch.manual_seed(0)
    build = dict(num_classes=2, in_chans=1, img_size=16, **settings)
    raw, average = (timm.create_model("vit_tiny_patch16_224", **build) for _ in range(2))
    state = {f"model.{k}": v for k, v in raw.state_dict().items()}
    state.update({f"model_ema.module.{k}": v for k, v in average.state_dict().items()})
    hparams = {"model_name": "vit_tiny_patch16_224", "num_classes": 2, "in_chans": 1, "img_size": 16}
    transform = {"mean": [0.25], "std": [0.5], "interpolation": "bicubic", "crop_pct": 1.0, "crop_mode": "center"}
    path = tmp_path / "run.ckpt"
    run = {"epoch": 3, "state_dict": state, "hyper_parameters": {**hparams, "model_kwargs": settings}}
    torch.save({**run, "eval_transform": transform, "label_names": ["cat", "dog"]}, path)
    x = torch.randn(2, 1, 16, 16)
    from_file = dict(pretrained=True, pretrained_cfg_overlay={"file": str(path), "num_classes": 2}, **settings)
    same = create_classifier("vit_tiny_patch16_224", 2, 1, 16, **from_file)
    assert torch.equal(_outputs(same, x), _outputs(average, x))
    config = timm.data.resolve_data_config({}, model=same)
    assert config["input_size"] == (1, 16, 16) and tuple(config["mean"]) == (0.25,)
    assert same.pretrained_cfg["label_names"] == ("cat", "dog")  # so that data of other classes is refused
    other = create_classifier("vit_tiny_patch16_224", 3, 1, 16, **from_file)
    assert other.head.weight.shape == (3, 192)  # a new head; the rest the run's average
    assert not other.pretrained_cfg.get("label_names")  # whose outputs the file's class names do not name
    assert all(torch.equal(v, average.state_dict()[k]) for k, v in other.state_dict().items() if "head" not in k)
    evaluated, built, _ = build_model("vit_tiny_patch16_224", path)
    assert torch.equal(_outputs(evaluated, x), _outputs(average, x)) and built["depth"] == 1
    # a file of another architecture, or one built with other settings, is one error that names them
    with pytest.raises(CheckpointError, match="does not fit vit_tiny_patch16_224; create 'crate_nano_patch4_32'"):
        create_classifier("vit_tiny_patch16_224", 10, 1, 32, pretrained=True, pretrained_cfg_overlay={"file": DIGITS})
    default_depth = dict(from_file, patch_size=4, depth=12)
    with pytest.raises(CheckpointError, match=r"do not fit .* with model_kwargs \{'patch_size': 4, 'depth': 1\}"):
        create_classifier("vit_tiny_patch16_224", 2, 1, 16, **default_depth)


def test_a_file_of_timm_s_own_model_keeps_the_classifier_its_cfg_names(tmp_path: Path) -> None:
    """A ResNet's classifier is ``fc``, a ConvNeXt's ``head.fc``: a file of one is read with its classes, so that
    training or evaluating from it keeps the trained classifier (it was taken for a file without one and replaced
    by a new, untrained head)."""
    import safetensors.torch

    from crate.lit import ImageClassifier
    from crate.models import read_checkpoint
    from crate.run import build_model

    x = torch.randn(2, 1, 32, 32)
    for name, classifier in (("resnet10t", "fc"), ("convnext_atto", "head.fc")):
        torch.manual_seed(0)
        trained = timm.create_model(name, num_classes=5, in_chans=1).eval()
        path = tmp_path / f"{name}.safetensors"
        safetensors.torch.save_file(trained.state_dict(), str(path))
        assert read_checkpoint(path).num_classes is None and read_checkpoint(path).classes_for(name) == 5
        module = ImageClassifier(name, num_classes=5, in_chans=1, img_size=32, pretrained_file=str(path))
        assert torch.equal(module.model.get_submodule(classifier).weight, trained.get_submodule(classifier).weight)
        evaluated, built, _ = build_model(name, path)
        assert built["num_classes"] == 5 and torch.equal(_outputs(evaluated, x), _outputs(trained, x))


def test_pretrained_weights_of_timm_s_own_model_offline_are_one_error_naming_the_model(monkeypatch) -> None:
    from huggingface_hub.errors import LocalEntryNotFoundError

    from crate.models import create_classifier

    def offline(*args, **kwargs):
        raise LocalEntryNotFoundError("no network and not in the cache")

    monkeypatch.setattr("timm.models._builder.load_state_dict_from_hf", offline)
    with pytest.raises(CheckpointError, match="the pretrained weights of resnet10t are not in the local hub cache"):
        create_classifier("resnet10t", 2, 3, 32, pretrained=True)


def test_a_colour_file_of_timm_s_own_vit_builds_a_gray_model_with_its_channels_folded(tmp_path: Path) -> None:
    """timm folds a file's three input channels into one by their sum (its ``adapt_input_conv``); it needs the
    file's own channels to do so, and the model built then declares the one channel and statistics it reads."""
    import safetensors.torch

    from crate.models import create_classifier

    settings = {"patch_size": 4, "depth": 1}
    colour = timm.create_model("vit_tiny_patch16_224", num_classes=2, in_chans=3, img_size=16, **settings)
    path = tmp_path / "colour.safetensors"
    safetensors.torch.save_file(colour.state_dict(), str(path))
    overlay = {"file": str(path), "num_classes": 2}
    gray = create_classifier(
        "vit_tiny_patch16_224", 2, 1, 16, pretrained=True, pretrained_cfg_overlay=overlay, **settings
    )
    torch.testing.assert_close(gray.patch_embed.proj.weight[:, 0], colour.patch_embed.proj.weight.sum(1))
    assert torch.equal(gray.blocks[0].attn.qkv.weight, colour.blocks[0].attn.qkv.weight)
    config = timm.data.resolve_data_config({}, model=gray)
    assert config["input_size"] == (1, 16, 16) and len(config["mean"]) == len(config["std"]) == 1


def test_a_file_of_another_timm_model_is_refused_not_loaded_as_nothing(tmp_path: Path) -> None:
    """A plain file records no architecture, and timm loads non-strictly once it drops a classifier of other
    classes: a ConvNeXt file given to a ResNet left the ResNet at its random initialisation without a word."""
    import safetensors.torch

    from crate.models import create_classifier

    path = tmp_path / "convnext.safetensors"
    safetensors.torch.save_file(timm.create_model("convnext_atto", num_classes=2).state_dict(), str(path))
    with pytest.raises(CheckpointError, match=r"do not fit resnet10t as built \(84 of the model's tensors are not"):
        create_classifier("resnet10t", 2, 3, 32, pretrained=True, pretrained_cfg_overlay={"file": str(path)})
