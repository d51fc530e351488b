"""Export of Lightning checkpoints to safetensors with a card, and the checkpoints that ship as timm tags."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import lightning as L
import pytest
import timm
import tomllib
import torch
import yaml

import crate  # noqa: F401
from crate.data.digits import load_digits_tensors
from crate.export import export_checkpoint, main
from crate.interpret.loading import held_out_accuracy
from crate.lit import DigitsDataModule, ImageClassifier
from crate.models import CheckpointError

REPO = Path(__file__).resolve().parents[1]
SHIPPED = [
    "crate_nano_patch4_32",
    "crate_alpha_nano_patch4_32",
    "vit_nano_patch4_32",
    "crate_micro_patch4_32",
    "crate_alpha_micro_patch4_32",
    "vit_micro_patch4_32",
]


@pytest.fixture(scope="module")
def lightning_run(tmp_path_factory) -> tuple[Path, ImageClassifier]:
    """A run folder as train.py leaves it: checkpoints/last.ckpt and config.yaml (digits)."""
    run = tmp_path_factory.mktemp("run")
    torch.manual_seed(0)
    module = ImageClassifier("crate_nano_patch4_32", num_classes=10, in_chans=1, img_size=32, warmup_epochs=0)
    trainer = L.Trainer(max_steps=15, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(module, DigitsDataModule(batch_size=32))
    (run / "checkpoints").mkdir()
    trainer.save_checkpoint(run / "checkpoints" / "last.ckpt")
    config = {
        "seed_everything": 0,
        "data": {"class_path": "crate.lit.DigitsDataModule", "init_args": {"img_size": 32}},
    }
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    return run, module.eval()


def test_export_writes_a_loadable_file_and_an_honest_card(lightning_run, tmp_path: Path) -> None:
    run, module = lightning_run
    out = tmp_path / "crate_nano_patch4_32.test.safetensors"
    card = export_checkpoint(run / "checkpoints" / "last.ckpt", out, train_command="python train.py fit ...")
    assert json.loads(out.with_suffix(".json").read_text()) == json.loads(json.dumps(card))
    markdown = out.with_suffix(".md").read_text()
    assert card["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest() and card["sha256"] in markdown
    assert card["model_settings"] == {} and "built with" not in markdown  # the name's own settings: none to name
    # the precision of the figure is said; a float32 run has no other precision to warn about
    assert card["recipe"]["precision"] == "32-true" and "held out (float32)" in markdown
    assert card["parameters"] == sum(p.numel() for p in module.model.parameters())
    # The card's accuracy equals the accuracy of the trained module itself on the digits validation split.
    _, val = load_digits_tensors(img_size=32, in_chans=1)
    with torch.no_grad():
        expected = int((module(val.images).argmax(-1) == val.labels).sum()) / len(val.labels)
    assert card["val_accuracy"] == pytest.approx(expected, abs=1e-9)
    loaded = timm.create_model(
        "crate_nano_patch4_32",
        pretrained=True,
        pretrained_cfg_overlay=dict(file=str(out)),
        num_classes=10,
        in_chans=1,
    ).eval()
    x = val.images[:4]
    with torch.no_grad():
        assert torch.equal(loaded(x), module(x))


def test_a_card_names_the_build_settings_its_file_records(tmp_path: Path) -> None:
    # lambd leaves every weight's shape as it is: a card that gave only the name would describe another model
    module = ImageClassifier("crate_nano_patch4_32", 10, in_chans=1, img_size=32, model_kwargs={"lambd": 0.5})
    ckpt = tmp_path / "run" / "checkpoints" / "last.ckpt"
    trainer = L.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(module, DigitsDataModule(batch_size=32))
    trainer.save_checkpoint(ckpt)
    card = export_checkpoint(ckpt, tmp_path / "crate_nano_patch4_32.test.safetensors", measure=False)
    assert card["model_settings"] == {"lambd": 0.5}
    markdown = (tmp_path / "crate_nano_patch4_32.test.md").read_text()
    assert "10 classes; built with `lambd=0.5`" in markdown
    overlay = dict(file=str(tmp_path / "crate_nano_patch4_32.test.safetensors"))
    loaded = timm.create_model("crate_nano_patch4_32", pretrained=True, pretrained_cfg_overlay=overlay, num_classes=10)
    assert {m.lambd for m in loaded.modules() if hasattr(m, "lambd")} == {0.5}  # what the card says it is


def test_a_run_with_patch_dropout_exports_the_plain_model_and_records_the_rate(tmp_path: Path) -> None:
    torch.manual_seed(0)
    kwargs = {"patch_drop_rate": 0.5}
    module = ImageClassifier("crate_nano_patch4_32", 10, in_chans=1, img_size=32, warmup_epochs=0, model_kwargs=kwargs)
    trainer = L.Trainer(max_steps=5, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(module, DigitsDataModule(batch_size=32))
    ckpt = tmp_path / "run" / "checkpoints" / "last.ckpt"
    trainer.save_checkpoint(ckpt)
    data = {"class_path": "crate.lit.DigitsDataModule", "init_args": {"img_size": 32}}
    (tmp_path / "run" / "config.yaml").write_text(yaml.safe_dump({"seed_everything": 0, "data": data}))
    out = tmp_path / "crate_nano_patch4_32.test.safetensors"
    card = export_checkpoint(ckpt, out)
    assert card["recipe"]["model_kwargs.patch_drop_rate"] == 0.5
    assert "patch_drop_rate" not in card["load"]  # a training setting: the file loads as the plain model
    _, val = load_digits_tensors(img_size=32, in_chans=1)
    module.eval()
    with torch.no_grad():  # every token at evaluation: the card's accuracy is the module's own
        expected = int((module(val.images).argmax(-1) == val.labels).sum()) / len(val.labels)
    assert card["val_accuracy"] == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("cap", [0.999, 0.5])
def test_a_card_gives_the_decay_its_moving_average_ended_at(cap: float, tmp_path: Path) -> None:
    """``ema_decay`` is the warm-up's cap; the card also says where the decay stood at the file's last step,
    ``min(cap, 1 - n**(-2/3))`` after n optimizer steps (0.658 after 5: under 0.999, over 0.5)."""
    module = ImageClassifier("crate_nano_patch4_32", 10, in_chans=1, img_size=32, warmup_epochs=0, ema_decay=cap)
    trainer = L.Trainer(max_steps=5, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(module, DigitsDataModule(batch_size=32))
    ckpt = tmp_path / "run" / "checkpoints" / "last.ckpt"
    trainer.save_checkpoint(ckpt)
    card = export_checkpoint(ckpt, tmp_path / "crate_nano_patch4_32.test.safetensors", measure=False)
    expected = min(cap, 1.0 - 5 ** (-2.0 / 3.0))
    assert card["global_step"] == 5 and card["recipe"]["ema_decay"] == cap
    assert card["recipe"]["ema_decay_last"] == pytest.approx(expected, abs=1e-6)
    assert (
        f"| ema_decay_last | {card['recipe']['ema_decay_last']} |"
        in (tmp_path / "crate_nano_patch4_32.test.md").read_text()
    )


def test_export_refuses_bad_checkpoints_with_a_clear_message(tmp_path: Path, capsys) -> None:
    torch.save({"weights": torch.zeros(3)}, tmp_path / "plain.pth")
    (tmp_path / "broken.ckpt").write_bytes(b"not a checkpoint")
    cases = [
        (tmp_path / "missing.ckpt", "does not exist"),
        (tmp_path / "broken.ckpt", "corrupt"),
        (tmp_path / "plain.pth", "not a Lightning checkpoint"),
    ]
    for path, message in cases:
        with pytest.raises(SystemExit) as exit_info:
            main([str(path), "--out", str(tmp_path / "x.safetensors")])
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "x.safetensors").exists()


def test_controls_are_for_encoders_only_and_written_label_equals_path(lightning_run, tmp_path: Path) -> None:
    run, _ = lightning_run
    ckpt = run / "checkpoints" / "last.ckpt"
    with pytest.raises(ValueError, match="--control scores encoders"):
        export_checkpoint(ckpt, tmp_path / "x.safetensors", controls={"other": ckpt})
    assert not (tmp_path / "x.safetensors").exists()
    for bad in ("no-label-or-path", "=path.ckpt"):  # the command line's LABEL=CHECKPOINT, mistyped
        with pytest.raises(SystemExit) as exit_info:
            main([str(ckpt), "--out", str(tmp_path / "x.safetensors"), "--control", bad])
        assert exit_info.value.code == 2
    assert not (tmp_path / "x.safetensors").exists()


def test_a_bfloat16_export_stores_16_bit_weights_and_its_card_scores_them_as_timm_loads_them(
    lightning_run, tmp_path: Path
) -> None:
    from safetensors import safe_open

    run, module = lightning_run
    out = tmp_path / "crate_nano_patch4_32.bf16.safetensors"
    card = export_checkpoint(run / "checkpoints" / "last.ckpt", out, dtype="bfloat16")
    with safe_open(str(out), "pt") as stored:
        assert {stored.get_tensor(key).dtype for key in stored.keys()} == {torch.bfloat16}
    assert "(float32, from the weights as stored in bfloat16)" in out.with_suffix(".md").read_text()
    # the card's figure is that of the module's weights rounded to bfloat16 and computed in float32
    rounded = {k: v.to(torch.bfloat16).float() for k, v in module.model.state_dict().items()}
    model = timm.create_model("crate_nano_patch4_32", num_classes=10, in_chans=1, img_size=32).eval()
    model.load_state_dict(rounded)
    _, val = load_digits_tensors(img_size=32, in_chans=1)
    with torch.no_grad():
        expected = int((model(val.images).argmax(-1) == val.labels).sum()) / len(val.labels)
    assert card["val_accuracy"] == pytest.approx(expected, abs=1e-9)


def test_a_failed_export_puts_back_the_file_it_was_replacing(lightning_run, tmp_path: Path, monkeypatch) -> None:
    run, _ = lightning_run
    out = tmp_path / "crate_nano_patch4_32.test.safetensors"
    files = [out, out.with_suffix(".json"), out.with_suffix(".md")]
    export_checkpoint(run / "checkpoints" / "last.ckpt", out, measure=False)
    before = [path.read_bytes() for path in files]

    def fail(*args, **kwargs):
        raise RuntimeError("interrupted while measuring")

    monkeypatch.setattr("crate.export.held_out_accuracy", fail)
    with pytest.raises(RuntimeError, match="interrupted while measuring"):
        export_checkpoint(run / "checkpoints" / "last.ckpt", out, dtype="float16", overwrite=True)
    assert [path.read_bytes() for path in files] == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in files)
    # A copy set aside by an export that was killed is never overwritten: the export stops and says why.
    aside = out.with_name(out.name + ".previous")
    aside.write_bytes(b"the only good copy")
    with pytest.raises(SystemExit) as exit_info:
        main([str(run / "checkpoints" / "last.ckpt"), "--out", str(out), "--no-accuracy", "--overwrite"])
    assert exit_info.value.code == 2
    assert aside.read_bytes() == b"the only good copy" and [path.read_bytes() for path in files] == before


def test_a_hub_folder_loads_through_timm_both_ways(lightning_run, tmp_path: Path, monkeypatch) -> None:
    from hub_cache import serve_offline

    run, module = lightning_run
    hub = tmp_path / "crate_nano_digits"
    card = export_checkpoint(run / "checkpoints" / "last.ckpt", hub_dir=hub)
    config = json.loads((hub / "config.json").read_text())
    assert config["architecture"] == "crate_nano_patch4_32" and config["num_classes"] == 10
    assert config["num_features"] == 96 and config["global_pool"] == "token" and len(config["label_names"]) == 10
    assert config["model_args"]["in_chans"] == 1 and config["pretrained_cfg"]["input_size"][0] == 1
    readme = (hub / "README.md").read_text()
    assert readme.startswith("---\nlibrary_name: timm") and f"{card['val_accuracy']:.4f}" in readme
    x = load_digits_tensors(img_size=32, in_chans=1)[1].images[:4]
    with torch.no_grad():
        expected = module(x)
        torch.testing.assert_close(timm.create_model(f"local-dir:{hub}", pretrained=True).eval()(x), expected)
        files = {name: hub / name for name in ("config.json", "model.safetensors", "README.md")}
        serve_offline(monkeypatch, tmp_path / "hub_cache", "crate-zoo/crate_nano_digits", files)
        from_hub = timm.create_model("hf-hub:crate-zoo/crate_nano_digits", pretrained=True).eval()
        torch.testing.assert_close(from_hub(x), expected)


def test_a_hub_repository_with_only_pytorch_model_bin_loads_as_timm_finds_it(
    lightning_run, tmp_path: Path, monkeypatch
) -> None:
    """timm takes a repository's model.safetensors, else its pytorch_model.bin; so do the zoo's readers (timm's
    name, and the tools' hub names). A repository with neither is one error that names both."""
    from hub_cache import serve_offline
    from safetensors.torch import load_file

    from crate.interpret import load_run

    run, module = lightning_run
    hub = tmp_path / "exported"
    export_checkpoint(run / "checkpoints" / "last.ckpt", hub_dir=hub, measure=False)
    torch.save(load_file(hub / "model.safetensors"), tmp_path / "pytorch_model.bin")
    files = {"config.json": hub / "config.json", "pytorch_model.bin": tmp_path / "pytorch_model.bin"}
    serve_offline(monkeypatch, tmp_path / "hub_cache", "crate-zoo/old_layout", files)
    serve_offline(monkeypatch, tmp_path / "hub_cache", "crate-zoo/no_weights", {"config.json": hub / "config.json"})
    x = load_digits_tensors(img_size=32, in_chans=1)[1].images[:4]
    with torch.no_grad():
        expected = module(x)
        torch.testing.assert_close(
            timm.create_model("hf-hub:crate-zoo/old_layout", pretrained=True).eval()(x), expected
        )
        torch.testing.assert_close(load_run("hf-hub:crate-zoo/old_layout", None)[0](x), expected)
    with pytest.raises(CheckpointError, match=r"model.safetensors .*; nor .*pytorch_model.bin"):
        timm.create_model("hf-hub:crate-zoo/no_weights", pretrained=True)


def test_a_hub_folder_s_weights_record_the_run_and_its_timm_name_loads_in_the_tools(
    lightning_run, tmp_path: Path, monkeypatch
) -> None:
    from hub_cache import serve_offline

    from crate.interpret import load_run
    from crate.models import read_checkpoint
    from crate.run import read_record

    run, module = lightning_run
    hub = tmp_path / "crate_nano_digits"
    export_checkpoint(run / "checkpoints" / "last.ckpt", hub_dir=hub, measure=False)
    held = read_checkpoint(hub / "model.safetensors")  # the folder's weights alone say what they are
    assert held.model_name == "crate_nano_patch4_32" and held.num_classes == 10
    assert held.label_names == tuple(json.loads((hub / "config.json").read_text())["label_names"])
    run_data = yaml.safe_load((run / "config.yaml").read_text())["data"]
    assert read_record(held).data_config == run_data
    x = load_digits_tensors(img_size=32, in_chans=1)[1].images[:4]
    files = {name: hub / name for name in ("config.json", "model.safetensors", "README.md")}
    serve_offline(monkeypatch, tmp_path / "hub_cache", "crate-zoo/crate_nano_digits", files)
    with torch.no_grad():
        expected = module(x)
        for name in (f"local-dir:{hub}", "hf-hub:crate-zoo/crate_nano_digits"):
            model, data_config = load_run(name, None)
            assert data_config == run_data, name  # the data the run held out, not the digits by default
            assert model.pretrained_cfg["label_names"] == held.label_names
            torch.testing.assert_close(model(x), expected)


def test_a_file_without_class_names_is_exported_with_its_data_s_names_in_every_file(
    lightning_run, tmp_path: Path
) -> None:
    from safetensors import safe_open

    run, _ = lightning_run
    old = tmp_path / "old_run"
    (old / "checkpoints").mkdir(parents=True)
    (old / "config.yaml").write_text((run / "config.yaml").read_text())
    loaded = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    loaded.pop("label_names")  # as files written before the names were recorded
    loaded["data_identity"].pop("classes")
    torch.save(loaded, old / "checkpoints" / "last.ckpt")
    out, hub = tmp_path / "old.safetensors", tmp_path / "old_hub"
    card = export_checkpoint(old / "checkpoints" / "last.ckpt", out, hub_dir=hub)
    names = [str(digit) for digit in range(10)]  # the digits' classes, in label order
    assert card["label_names"] == names and json.loads((hub / "config.json").read_text())["label_names"] == names
    for weights in (out, hub / "model.safetensors"):
        with safe_open(str(weights), framework="pt") as handle:
            assert json.loads(handle.metadata()["label_names"]) == names, weights


def test_export_onto_an_existing_file_keeps_it_unless_told_and_hub_files_share_one_mode(
    lightning_run, tmp_path: Path, capsys
) -> None:
    run, _ = lightning_run
    ckpt = str(run / "checkpoints" / "last.ckpt")
    out = tmp_path / "mine.safetensors"
    out.write_bytes(b"a file the user wants to keep")
    with pytest.raises(SystemExit) as exit_info:
        main([ckpt, "--out", str(out), "--no-accuracy"])
    assert exit_info.value.code == 2
    message = capsys.readouterr().err.strip().splitlines()
    assert len(message) == 1 and "exists and was left as it is; pass --overwrite" in message[0]
    assert out.read_bytes() == b"a file the user wants to keep" and sorted(tmp_path.iterdir()) == [out]
    main([ckpt, "--out", str(out), "--no-accuracy", "--overwrite"])
    assert out.read_bytes()[:8] != b"a file t" and out.with_suffix(".json").is_file()
    hub = tmp_path / "hub"
    export_checkpoint(ckpt, hub_dir=hub, measure=False)
    modes = {path.name: path.stat().st_mode & 0o777 for path in hub.iterdir()}
    umask = os.umask(0)
    os.umask(umask)
    assert set(modes.values()) == {0o666 & ~umask}, modes  # what open() gives every other file


@pytest.mark.parametrize("flag", ["--out", "--hub-dir"])
def test_an_export_under_a_file_is_refused_before_the_checkpoint_is_read(
    lightning_run, tmp_path: Path, capsys, flag: str
) -> None:
    run, _ = lightning_run
    (tmp_path / "file").write_text("not a folder")
    target = tmp_path / "file" / ("x.safetensors" if flag == "--out" else "hub")
    with pytest.raises(SystemExit) as exit_info:
        main([str(run / "checkpoints" / "last.ckpt"), flag, str(target)])
    assert exit_info.value.code == 2
    what = "x.safetensors and its card" if flag == "--out" else "the hub folder"
    assert capsys.readouterr().err == (
        f"crate-export: error: {flag} {tmp_path / 'file'}: {tmp_path / 'file'} is a file, not a folder; give a folder "
        f"for {what}\n"
    )
    assert sorted(tmp_path.iterdir()) == [tmp_path / "file"] and (tmp_path / "file").read_text() == "not a folder"


def test_a_bad_hub_folder_is_one_clear_error(lightning_run, tmp_path: Path) -> None:
    run, _ = lightning_run
    hub = tmp_path / "hub"
    export_checkpoint(run / "checkpoints" / "last.ckpt", hub_dir=hub, measure=False)
    weights = (hub / "model.safetensors").read_bytes()
    (hub / "model.safetensors").write_bytes(weights[:1000])
    with pytest.raises(CheckpointError, match="corrupt or truncated"):
        timm.create_model(f"local-dir:{hub}", pretrained=True)
    vit = timm.create_model("vit_nano_patch4_32", num_classes=10, in_chans=1)
    from safetensors.torch import save_file

    save_file(vit.state_dict(), str(hub / "model.safetensors"))  # another model's weights under this config
    with pytest.raises(CheckpointError, match="does not fit"):
        timm.create_model(f"local-dir:{hub}", pretrained=True)
    (hub / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="holds no weights file"):
        timm.create_model(f"local-dir:{hub}", pretrained=True)
    with pytest.raises(ValueError, match="not an empty folder"):
        export_checkpoint(run / "checkpoints" / "last.ckpt", hub_dir=hub)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_checkpoint_loads_offline_and_reproduces_its_card(name: str) -> None:
    card_path = REPO / "checkpoints" / f"{name}.digits.json"
    assert card_path.is_file(), f"checkpoints/{name}.digits.json is missing: run `make checkpoints`"
    card = json.loads(card_path.read_text())
    model = timm.create_model(f"{name}.digits", pretrained=True)
    assert model.num_classes == 10 and card["val_accuracy"] >= 0.9
    assert held_out_accuracy(model, load_digits_tensors(32, 1)[1]) == card["val_accuracy"]
    file = REPO / "checkpoints" / card["file"]
    assert hashlib.sha256(file.read_bytes()).hexdigest() == card["sha256"]


def test_every_subpackage_is_packaged() -> None:
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(path.parent.relative_to(REPO).parts) for path in (REPO / "crate").rglob("__init__.py")} | {
        "crate.checkpoints"
    }
    assert found == listed


def test_a_card_of_a_bf16_run_says_validate_measures_in_bf16() -> None:
    from crate.model_card import card_markdown

    card = json.loads((REPO / "checkpoints" / "crate_nano_patch4_32.cifar10.json").read_text())
    assert card["recipe"]["precision"] == "bf16-mixed"
    line = next(line for line in card_markdown(card).splitlines() if "measured on this file" in line)
    assert card["dtype"] == "float16"  # shipped at half the size: the figure is that of the widened weights
    assert (
        "(float32, from the weights as stored in float16; `train.py validate` measures in the run's precision " in line
    )
    assert line in (REPO / "checkpoints" / "crate_nano_patch4_32.cifar10.md").read_text()


def test_an_encoder_card_reads_its_lead_over_each_control_against_two_standard_errors() -> None:
    from crate.model_card import card_markdown

    card = json.loads((REPO / "checkpoints" / "crate_nano_patch4_32.cifar10_simdino.json").read_text())
    own = card["frozen_features"]["this file"]
    card["frozen_features"]["a control as good"] = dict(own)  # a lead of 0: no finding
    worse = {"knn_top1": own["knn_top1"] - 0.01, "linear_probe_top1": own["linear_probe_top1"] + 0.2}
    card["frozen_features"]["a control 1 point below, 20 above"] = worse
    lines = {line.split(":")[0]: line for line in card_markdown(card).splitlines() if line.startswith("- this file")}
    n, p = card["val_images"], (own["knn_top1"] + card["frozen_features"]["random init (seed 0)"]["knn_top1"]) / 2
    noise = 2 * (2 * p * (1 - p) / n) ** 0.5  # two binomial standard errors of a difference of two accuracies
    lead = own["knn_top1"] - card["frozen_features"]["random init (seed 0)"]["knn_top1"]
    assert (
        f"k-NN {100 * lead:+.1f} points (two standard errors: {100 * noise:.1f});"
        in lines["- this file against random init (seed 0)"]
    )
    assert lines["- this file against a control as good"].count("+0.0 points") == 2
    assert lines["- this file against a control as good"].count("not a finding") == 2
    within, below = lines["- this file against a control 1 point below, 20 above"].split(";")
    assert "k-NN +1.0 points" in within and within.endswith("not a finding") and below.endswith("below it")


def test_a_checkpoint_out_of_its_run_folder_gets_a_card_that_does_not_guess_its_precision(
    lightning_run, tmp_path: Path
) -> None:
    """Without the run's config.yaml the precision and seed are unknown: the card says so instead of the
    float32 default (a bf16 run moved out of its folder would otherwise be carded as float32)."""
    from crate.model_card import UNKNOWN_RUN_SETTING

    run, _ = lightning_run
    moved = tmp_path / "moved.ckpt"
    moved.write_bytes((run / "checkpoints" / "last.ckpt").read_bytes())
    out = tmp_path / "crate_nano_patch4_32.moved.safetensors"
    card = export_checkpoint(moved, out, train_command="python train.py fit ...", measure=False)
    assert card["recipe"]["precision"] == UNKNOWN_RUN_SETTING and card["recipe"]["seed"] == UNKNOWN_RUN_SETTING
    assert f"| precision | {UNKNOWN_RUN_SETTING} |" in out.with_suffix(".md").read_text()
    # without a command given, the card named a config.yaml that does not exist as the one the run was trained with
    card = export_checkpoint(moved, tmp_path / "unnamed.safetensors", measure=False)
    assert card["train_command"].startswith("# training command unknown: no readable config.yaml of the run beside")
    card = export_checkpoint(run / "checkpoints" / "last.ckpt", tmp_path / "named.safetensors", measure=False)
    assert card["train_command"] == f"# trained with the LightningCLI config {run / 'config.yaml'}"
    copied = tmp_path / "copied"  # a run whose config.yaml no longer parses: unknown, not read as if it did
    (copied / "checkpoints").mkdir(parents=True)
    (copied / "checkpoints" / "last.ckpt").write_bytes(moved.read_bytes())
    (copied / "config.yaml").write_text("trainer: {precision: bf16-mixed\n")
    card = export_checkpoint(copied / "checkpoints" / "last.ckpt", tmp_path / "broken.safetensors", measure=False)
    assert card["recipe"]["precision"] == UNKNOWN_RUN_SETTING and "no readable config.yaml" in card["train_command"]


def test_a_run_started_from_a_file_s_weights_names_that_file_on_its_card(tmp_path: Path) -> None:
    """A fine-tune or a further cycle counts its epochs from other weights: the card says from which."""
    torch.manual_seed(0)
    digits = {"class_path": "crate.lit.DigitsDataModule", "init_args": {"img_size": 32}}
    first = ImageClassifier("crate_nano_patch4_32", 10, in_chans=1, img_size=32, warmup_epochs=0)
    trainer = L.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(first, DigitsDataModule(batch_size=32))
    start = tmp_path / "first.ckpt"
    trainer.save_checkpoint(start)
    second = ImageClassifier(
        "crate_nano_patch4_32", 10, in_chans=1, img_size=32, warmup_epochs=0, pretrained_file=str(start)
    )
    assert torch.equal(second.model.state_dict()["head.weight"], first.model.state_dict()["head.weight"])
    trainer = L.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(second, DigitsDataModule(batch_size=32))
    ckpt = tmp_path / "run" / "checkpoints" / "last.ckpt"
    trainer.save_checkpoint(ckpt)
    (tmp_path / "run" / "config.yaml").write_text(yaml.safe_dump({"seed_everything": 0, "data": digits}))
    digest = hashlib.sha256(start.read_bytes()).hexdigest()
    first_card = export_checkpoint(start, tmp_path / "crate_nano_patch4_32.first.safetensors")
    assert "pretrained_file" not in first_card["recipe"]
    # the start file replaced at the same path (e.g. by a better run's): the card still tells the weights used
    trainer = L.Trainer(max_steps=3, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(first, DigitsDataModule(batch_size=32))
    trainer.save_checkpoint(start)
    assert hashlib.sha256(start.read_bytes()).hexdigest() != digest
    card = export_checkpoint(ckpt, tmp_path / "crate_nano_patch4_32.second.safetensors")
    assert card["recipe"]["pretrained_file"] == str(start)
    assert card["recipe"]["pretrained_sha256"] == digest
    markdown = (tmp_path / "crate_nano_patch4_32.second.md").read_text()
    assert f"2 optimizer steps, starting from the weights of `{start}` (sha256 `{digest}`," in markdown
    # resumed after the replacement: the run's record of its start is the checkpoint's, not the file's now
    resumed = ImageClassifier(
        "crate_nano_patch4_32", 10, in_chans=1, img_size=32, warmup_epochs=0, pretrained_file=str(start)
    )
    trainer = L.Trainer(max_steps=3, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(resumed, DigitsDataModule(batch_size=32), ckpt_path=ckpt)
    trainer.save_checkpoint(ckpt)
    card = export_checkpoint(ckpt, tmp_path / "crate_nano_patch4_32.resumed.safetensors")
    assert card["global_step"] == 3 and card["recipe"]["pretrained_sha256"] == digest
    # a checkpoint from before the record: the card says the digest is unknown, and the line names no digest
    held = torch.load(ckpt, weights_only=False)
    del held["start_weights"]
    torch.save(held, ckpt)
    card = export_checkpoint(ckpt, tmp_path / "crate_nano_patch4_32.old.safetensors")
    assert card["recipe"]["pretrained_sha256"].startswith("unknown")
    markdown = (tmp_path / "crate_nano_patch4_32.old.md").read_text()
    assert f"starting from the weights of `{start}` (the epochs it took" in markdown


def test_every_shipped_card_is_its_record_rendered_and_names_the_file_s_classes() -> None:
    """A card's page is what ``card_markdown`` writes from its JSON (no hand edits, no page of an older renderer),
    and the classes it names are the ones the weights file carries in its metadata."""
    from safetensors import safe_open

    from crate.model_card import card_markdown

    cards = sorted((REPO / "checkpoints").glob("*.json"))
    assert len(cards) == 22
    for path in cards:
        card = json.loads(path.read_text())
        assert path.with_suffix(".md").read_text() == card_markdown(card), path.name
        with safe_open(str(REPO / "checkpoints" / card["file"]), "pt") as handle:
            names = json.loads((handle.metadata() or {}).get("label_names", "null"))
        assert card.get("label_names") == names, path.name
