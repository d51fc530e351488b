"""One room for a run: ``crate.run`` sits below export, the report, the results table and the benchmarks, and
they take a run's facts (kind, recipe, held-out data) from it, not from the report's loading module."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

from crate.models import CheckpointError
from crate.run import UNKNOWN_RUN_SETTING, Run

REPO = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_the_run_room_imports_nothing_above_it_and_nothing_outside_the_report_reads_its_loading_module() -> None:
    for path in (REPO / "crate" / "run").rglob("*.py"):
        above = {m for m in _imports(path) if m.split(".")[:2] in (["crate", "interpret"], ["crate", "lit"])}
        above |= {m for m in _imports(path) if m in ("crate.export", "crate.results", "crate.model_card")}
        assert not above, f"{path} imports {above}"
    outside = [*(REPO / "crate").rglob("*.py"), *(REPO / "benchmarks").glob("*.py"), *(REPO / "scripts").glob("*.py")]
    for path in outside:
        if "interpret" in path.parts:
            continue
        assert "crate.interpret.loading" not in _imports(path), f"{path} reads run data from crate.interpret.loading"


def test_a_run_s_recipe_says_unknown_without_its_config_and_reads_it_with_one(tmp_path: Path) -> None:
    from conftest import run_in_process

    result = run_in_process(
        "fit", "--config", str(REPO / "configs" / "crate_nano_digits.yaml"), "--trainer.max_epochs", "1",
        "--trainer.limit_train_batches", "2", "--trainer.limit_val_batches", "1", "--log_root", str(tmp_path),
        "--trainer.enable_progress_bar", "false",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    ckpt = tmp_path / "crate_nano_digits" / "version_0" / "checkpoints" / "last.ckpt"
    run = Run.open(ckpt)
    config = yaml.safe_load((ckpt.parent.parent / "config.yaml").read_text())
    assert run.kind == "ImageClassifier" and not run.is_encoder and run.has_classifier
    assert run.recipe()["seed"] == config["seed_everything"] and run.recipe()["lr"] == config["model"]["lr"]
    assert run.data_description.startswith("DigitsDataModule(") and run.epochs == 1
    moved = tmp_path / "moved.ckpt"
    moved.write_bytes(ckpt.read_bytes())
    assert Run.open(moved).recipe()["precision"] == UNKNOWN_RUN_SETTING
    (tmp_path / "weights.pt").write_bytes(b"")
    with pytest.raises(CheckpointError):
        Run.open(tmp_path / "weights.pt")


def test_an_accuracy_is_refused_where_the_data_s_labels_or_class_names_are_not_the_model_s() -> None:
    import torch
    from torch.utils.data import TensorDataset

    from crate.run.held_out import check_label_names, held_out_topk

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)  # three classes
    images = torch.randn(6, 4)
    with pytest.raises(ValueError, match="labels up to 3 but the model has 3 classes"):
        held_out_topk(model, TensorDataset(images, torch.tensor([0, 1, 2, 3, 0, 1])))
    labels = torch.tensor([0, 1, 2, 2, 0, 1])
    expected = float((model(images).argmax(-1) == labels).float().mean())  # computed here, independently
    assert held_out_topk(model, TensorDataset(images, labels))[1] == pytest.approx(expected)

    model.pretrained_cfg = {"label_names": ("cat", "dog", "bird")}
    check_label_names(model, ["cat", "dog", "bird"], "data")  # the same names in the same order pass
    check_label_names(model, None, "data")  # data that names no classes: nothing to compare
    with pytest.raises(ValueError, match=r"has the classes \['bird', 'cat', 'dog'\], but the model was trained") as err:
        check_label_names(model, ["bird", "cat", "dog"], "data")  # same names, other label order
    assert "(the same names in another order: label 0 is 'bird', not 'cat')" in str(err.value)
    many = [f"class{i}" for i in range(10)]
    model.pretrained_cfg = {"label_names": tuple(many)}
    with pytest.raises(ValueError, match=r"^data has 10 classes \[class0, class1, class2, \.\.\.\], but") as err:
        check_label_names(model, [*many[:3], "kitty", *many[4:]], "data")  # one folder renamed: shown in part
    assert "(missing ['class3']; new ['kitty'])" in str(err.value)  # the difference, which the lists hide
    model.pretrained_cfg = {}
    check_label_names(model, ["a", "b", "c"], "data")  # a model without names: nothing to compare


def _lightning_file(path: Path, **entries) -> Path:
    """A Lightning checkpoint's layout written by hand: weights under ``state_dict``, the module's settings under
    ``hyper_parameters``, and whatever the run added at the top level."""
    import torch

    head = {"model.head.weight": torch.zeros(3, 8), "model.head.bias": torch.zeros(3)}
    hyper = {"model_name": "crate_nano_patch4_32", "num_classes": 3, "lr": 1e-3}
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": head, "hyper_parameters": hyper, "epoch": 4, "global_step": 40, **entries}, path)
    return path


def test_the_run_record_is_read_in_the_run_room_and_the_weights_reader_keeps_only_the_class_names(
    tmp_path: Path,
) -> None:
    from crate.models import read_checkpoint
    from crate.run import read_record

    identity = {"source": "folder", "classes": ["heron", "egret", "stork"], "img_size": 24}
    data = {"class_path": "crate.lit.ImageFolderDataModule", "init_args": {"root": "photos"}}
    schedule = [{"t_initial": 90, "warmup_t": 10, "warmup_prefix": True}]
    optimizer = [{"param_groups": [{"initial_lr": 2e-3, "lr": 1e-4}]}]
    ckpt = _lightning_file(
        tmp_path / "new.ckpt", crate_module="ImageClassifier", data_config=data, data_identity=identity,
        label_names=identity["classes"], lr_schedulers=schedule, optimizer_states=optimizer,
    )  # fmt: skip
    held = read_checkpoint(ckpt)
    record = read_record(held)
    assert (record.module, record.epoch, record.global_step, record.data_config) == ("ImageClassifier", 4, 40, data)
    assert record.data_identity == identity and record.hyper_parameters["lr"] == 1e-3
    assert (record.planned_steps, record.peak_lr) == (100, 2e-3)  # warmup before the decay, then the decay
    assert held.label_names == ("heron", "egret", "stork")
    # a file written before the class names had their own entry: from its data identity
    older = read_checkpoint(_lightning_file(tmp_path / "older.ckpt", data_identity=identity))
    assert older.label_names == ("heron", "egret", "stork") and read_record(older).module is None
    # a file written before the data section was recorded in it: from the run folder's config.yaml around it
    run = tmp_path / "run" / "version_0"
    _lightning_file(run / "checkpoints" / "last.ckpt")
    (run / "config.yaml").write_text(yaml.safe_dump({"data": data, "seed_everything": 0}))
    assert read_record(read_checkpoint(run / "checkpoints" / "last.ckpt")).data_config == data
    assert read_record(read_checkpoint(_lightning_file(tmp_path / "alone.ckpt"))).data_config is None


def test_the_models_room_knows_weight_files_not_runs() -> None:
    for path in (REPO / "crate" / "models").rglob("*.py"):
        imported = {m for m in _imports(path) if m.split(".")[:2] in (["crate", "run"], ["crate", "lit"])}
        assert not imported, f"{path} imports {imported}"
        text = path.read_text()
        for key in ("crate_module", "data_config", "config.yaml", "optimizer_states", "lr_schedulers"):
            assert not re.search(rf"\b{re.escape(key)}\b", text), f"{path} reads a run's {key}"


def test_a_file_written_mid_epoch_counts_its_full_epochs_and_the_batches_of_the_next(tmp_path: Path) -> None:
    """Lightning records the epoch a file was written in; a file written mid-epoch (an interrupt, a save every N
    steps) had trained only part of it, and its card said one epoch more than ran. Expected here: the step in
    each file's name, divided by the batches an epoch has (limited to 6)."""
    from conftest import run_in_process

    from crate.model_card import _trained_line

    per_epoch = 6
    result = run_in_process(
        "fit", "--config", str(REPO / "configs" / "crate_nano_digits.yaml"), "--trainer.max_epochs", "2",
        "--trainer.limit_train_batches", str(per_epoch), "--trainer.limit_val_batches", "1",
        "--latest_checkpoint.every_n_train_steps", "5", "--latest_checkpoint.save_top_k", "-1",
        "--log_root", str(tmp_path), "--trainer.enable_progress_bar", "false",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    folder = tmp_path / "crate_nano_digits" / "version_0" / "checkpoints"
    mid_epoch = sorted(folder.glob("latest-*.ckpt"))
    # and the state the fit ended in, written after its last epoch (2 whole epochs, no batch of a third)
    names = ["latest-epoch000-step000005.ckpt", "latest-epoch001-step000010.ckpt", "latest-epoch001-step000012.ckpt"]
    assert [p.name for p in mid_epoch] == names
    for path in mid_epoch:
        step = int(re.search(r"step(\d+)", path.name).group(1))
        run = Run.open(path)
        assert (run.epochs, run.batches_into_epoch) == divmod(step, per_epoch), path.name
    best = Run.open(next(folder.glob("best-*.ckpt")))  # written at an epoch's end
    assert best.batches_into_epoch == 0 and best.epochs == best.record.global_step // per_epoch
    card = {"epochs": 1, "batches_into_epoch": 4, "global_step": 10, "planned_steps": 10}
    assert _trained_line(card) == "1 epoch and 4 batches of the next, 10 optimizer steps"
    assert _trained_line(dict(card, batches_into_epoch=0)) == "1 epoch, 10 optimizer steps"
    one_step = {"epochs": 2, "batches_into_epoch": 1, "global_step": 1, "planned_steps": 1}
    assert _trained_line(one_step) == "2 epochs and 1 batch of the next, 1 optimizer step"
    first = {"epochs": 0, "batches_into_epoch": 3, "global_step": 3, "planned_steps": 3}
    assert _trained_line(first) == "3 batches of the first epoch, 3 optimizer steps"  # not "0 epochs and 3 of the next"
