"""A zoo run's file records the settings its model was built with (``model_kwargs``); loading it through timm
builds that model, including the settings that leave every weight's shape as it is (the ISTA step's ``lambd``
and ``step_size``, the number of MSSA subspaces at a fixed width), which would otherwise load without an error
and compute another function."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import timm
import torch
from safetensors.torch import save_file
from timm.models import model_entrypoint

import crate  # noqa: F401
from benchmarks.official_layouts import perturb_
from crate.lit import ImageClassifier, MaskedAutoencoder, SelfDistillation
from crate.models import registry

CASES = [
    ("crate_nano_patch4_32", {"lambd": 1.0, "num_heads": 2}),  # the name's own: 4 subspaces, lambd 0.1
    ("crate_alpha_nano_patch4_32", {"step_size": 0.3}),
]


def _trained(name: str, settings: dict[str, Any]) -> torch.nn.Module:
    return perturb_(timm.create_model(name, num_classes=10, **settings)).eval()


def _exported(path: Path, name: str, model: torch.nn.Module, settings: dict[str, Any]) -> Path:
    """The layout ``crate.export`` writes: weights, and the architecture in the metadata."""
    config = {"num_classes": 10, "in_chans": 3, "img_size": 32, "model_kwargs": settings}
    metadata = {"model_name": name, "format": "pt", "model_config": json.dumps(config)}
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path), metadata=metadata)
    return path


def _lightning(path: Path, name: str, model: torch.nn.Module, settings: dict[str, Any]) -> Path:
    """A training checkpoint's layout: weights under ``state_dict``, the module's settings beside them."""
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    hyper = {"model_name": name, "num_classes": 10, "img_size": 32, "model_kwargs": settings}
    torch.save({"state_dict": state, "hyper_parameters": hyper}, path)
    return path


def _logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1)))


@pytest.mark.parametrize("write", [_exported, _lightning])
@pytest.mark.parametrize(("name", "settings"), CASES)
def test_a_file_is_built_with_the_settings_it_records(tmp_path: Path, write, name: str, settings: dict) -> None:
    trained = _trained(name, settings)
    path = write(tmp_path / "run.file", name, trained, settings)
    loaded = timm.create_model(name, pretrained=True, pretrained_cfg_overlay=dict(file=str(path)))
    assert torch.equal(_logits(loaded), _logits(trained))
    default = timm.create_model(name, num_classes=10)  # the same weights under the name's own settings
    default.load_state_dict(trained.state_dict())
    assert (_logits(default) - _logits(trained)).abs().max() > 1e-3  # the settings change the function


# another value than the file's, and the value the model name has of its own (crate_nano: 4 subspaces), which the
# name's function merges into every call
@pytest.mark.parametrize(("key", "value"), [("lambd", 0.5), ("num_heads", 4)])
def test_another_setting_asked_for_is_built_as_asked_and_said(tmp_path: Path, key: str, value: float) -> None:
    """A setting the caller gives is built as given, with a warning naming both values; the settings it does not
    give still come from the file."""
    name, settings = CASES[0]
    trained = _trained(name, settings)
    path = _exported(tmp_path / "run.safetensors", name, trained, settings)
    message = rf"trained with {key}={settings[key]}; building crate_nano_patch4_32 with {key}={value} as asked"
    with pytest.warns(UserWarning, match=message):
        asked = timm.create_model(name, pretrained=True, pretrained_cfg_overlay=dict(file=str(path)), **{key: value})
    built = timm.create_model(name, num_classes=10, **dict(settings, **{key: value}))
    built.load_state_dict(trained.state_dict())
    assert torch.equal(_logits(asked), _logits(built))
    from_file = timm.create_model(name, num_classes=10, **settings)
    from_file.load_state_dict(trained.state_dict())
    assert not torch.equal(_logits(asked), _logits(from_file))  # not the file's settings


def test_a_run_from_such_a_file_records_its_settings_so_its_own_files_build_it_again(tmp_path: Path) -> None:
    """Fine-tuning from the file builds its model; the run's hyper-parameters, which its checkpoints and
    exports record, name the settings the file gave."""
    name, settings = CASES[0]
    trained = _trained(name, settings)
    path = _exported(tmp_path / "start.safetensors", name, trained, settings)
    module = ImageClassifier(name, num_classes=10, img_size=32, pretrained_file=str(path))
    assert module.hparams.model_kwargs == settings
    assert torch.equal(_logits(module.model), _logits(trained))


def test_a_run_that_asks_for_the_names_own_value_is_built_and_recorded_as_asked(tmp_path: Path) -> None:
    """A run from such a file that gives a setting as the model name's own value (``num_heads=4`` for
    crate_nano_patch4_32, whose file has 2) is built with it and says so; it records that value beside the
    settings it took from the file, so its checkpoints and exports build the model it trained."""
    name, settings = CASES[0]
    trained = _trained(name, settings)
    path = _exported(tmp_path / "start.safetensors", name, trained, settings)
    with pytest.warns(UserWarning, match="trained with num_heads=2; building crate_nano_patch4_32 with num_heads=4"):
        module = ImageClassifier(
            name, num_classes=10, img_size=32, pretrained_file=str(path), model_kwargs={"num_heads": 4}
        )
    assert module.hparams.model_kwargs == {"num_heads": 4, "lambd": 1.0}
    assert module.model.blocks[0].attn.num_heads == 4
    assert {float(block.ista.lambd) for block in module.model.blocks} == {1.0}  # the rest from the file
    rebuilt = timm.create_model(name, num_classes=10, **module.hparams.model_kwargs)  # as its own export builds it
    rebuilt.load_state_dict(module.model.state_dict())
    assert torch.equal(_logits(rebuilt), _logits(module.model))


def test_a_pretraining_run_from_such_a_file_records_its_settings(tmp_path: Path) -> None:
    """Masked pretraining and SimDINO start from a file through ``model_kwargs`` (``pretrained``,
    ``pretrained_cfg_overlay``); each builds the file's model and records the settings it took, as a
    fine-tuning run does."""
    mae_settings = {"decoder_depth": 4, "lambd": 2.0}  # the released decoder; the name's own lambd: 0.5
    trained = perturb_(timm.create_model("crate_mae_nano_patch4_32", num_classes=0, **mae_settings)).eval()
    path = _lightning(tmp_path / "mae.ckpt", "crate_mae_nano_patch4_32", trained, mae_settings)
    overlay = {"file": str(path), "num_classes": 0}
    mae = MaskedAutoencoder(img_size=32, model_kwargs={"pretrained": True, "pretrained_cfg_overlay": overlay})
    assert mae.hparams.model_kwargs["lambd"] == 2.0 and mae.hparams.model_kwargs["decoder_depth"] == 4
    images = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    assert torch.equal(mae.model.eval().forward_features(images), trained.forward_features(images))

    name, settings = CASES[0]
    start = _exported(tmp_path / "start.safetensors", name, _trained(name, settings), settings)
    overlay = {"file": str(start), "num_classes": 10}
    simdino = SelfDistillation(name, img_size=32, model_kwargs={"pretrained": True, "pretrained_cfg_overlay": overlay})
    assert {k: simdino.hparams.model_kwargs[k] for k in settings} == settings
    assert simdino.student.blocks[0].attn.num_heads == 2


def test_masked_pretraining_continues_with_the_decoder_of_the_file_it_starts_from(tmp_path: Path) -> None:
    """A pretraining run's own file holds a decoder of its depth (here 2, the released pretraining's 4): a run
    that continues from it builds that decoder, which the file fills, where no ``decoder_depth`` is given."""
    name = "crate_mae_nano_patch4_32"
    trained = perturb_(timm.create_model(name, num_classes=0, decoder_depth=2)).eval()
    path = _lightning(tmp_path / "pretrain.ckpt", name, trained, {"decoder_depth": 2})
    overlay = {"file": str(path), "num_classes": 0}
    mae = MaskedAutoencoder(name, img_size=32, model_kwargs={"pretrained": True, "pretrained_cfg_overlay": overlay})
    assert mae.model.decoder_depth == 2 and mae.hparams.model_kwargs["decoder_depth"] == 2
    held, loaded = trained.state_dict(), mae.model.state_dict()
    assert held.keys() == loaded.keys() and all(torch.equal(held[k], loaded[k]) for k in held)
    assert MaskedAutoencoder(name, img_size=32).model.decoder_depth == 4  # no file: the released decoder


def test_a_pretraining_file_is_read_as_an_encoder_unless_its_decoder_is_asked_for(tmp_path: Path) -> None:
    """A masked-pretraining run records its decoder; the decoder is a part the file fills only where it is built,
    so the model name's encoder reads the file without a word, and ``decoder_depth`` asked for builds it."""
    import warnings

    name = "crate_mae_nano_patch4_32"
    trained = perturb_(timm.create_model(name, num_classes=0, decoder_depth=1)).eval()
    path = _lightning(tmp_path / "pretrain.ckpt", name, trained, {"decoder_depth": 1})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        encoder = timm.create_model(name, pretrained=True, pretrained_cfg_overlay=dict(file=str(path), num_classes=0))
    assert encoder.decoder_depth == 0
    assert torch.equal(
        encoder.forward_features(torch.ones(1, 3, 32, 32)), trained.forward_features(torch.ones(1, 3, 32, 32))
    )
    overlay = dict(file=str(path), num_classes=0)
    pretraining = timm.create_model(name, pretrained=True, pretrained_cfg_overlay=overlay, decoder_depth=1)
    assert pretraining.decoder_depth == 1


def test_a_run_is_built_with_its_pooling_and_may_be_read_under_another_as_a_shipped_file_is(tmp_path: Path) -> None:
    """The pooling a run trained with is its file's model's; asked for another, the pooling rule applies as it
    does to a file without a record: a sequence-pooling file read with average pooling for features loads without
    a word (its pooling weights left out)."""
    import warnings

    name, settings = "crate_nano_patch4_32", {"global_pool": "avg"}
    trained = _trained(name, settings)
    path = _exported(tmp_path / "avg.safetensors", name, trained, settings)
    loaded = timm.create_model(name, pretrained=True, pretrained_cfg_overlay=dict(file=str(path)))
    assert torch.equal(_logits(loaded), _logits(trained))
    name, settings = "crate_cct4_3x2_32", {"global_pool": "seq"}
    path = _exported(tmp_path / "seq.safetensors", name, _trained(name, settings), settings)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        overlay = dict(file=str(path), num_classes=10)
        features = timm.create_model(
            name, pretrained=True, pretrained_cfg_overlay=overlay, num_classes=0, global_pool="avg"
        )
    assert features.global_pool == "avg"


def test_every_zoo_model_function_tells_its_callers_settings_from_its_own() -> None:
    """Each zoo model function is registered through ``crate.models.registry`` (timm's own ``register_model``
    would leave a setting asked for as the name's own value indistinguishable from one not given)."""
    zoo = [name for name in timm.list_models() if model_entrypoint(name).__module__.startswith("crate.")]
    plain = [name for name in zoo if model_entrypoint(name).__code__.co_filename != registry.__file__]
    assert len(zoo) > 50 and not plain, plain
