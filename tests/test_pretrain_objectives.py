"""pretrain.py's --objective: the masked autoencoder by default, SimDINO by name, a clear error otherwise."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from crate.lit import MaskedAutoencoder, SelfDistillation
from pretrain import OBJECTIVES, objective_and_rest

REPO = Path(__file__).resolve().parents[1]


def test_the_objective_is_read_before_or_after_the_subcommand() -> None:
    assert OBJECTIVES == {"mae": MaskedAutoencoder, "simdino": SelfDistillation}
    assert objective_and_rest(["fit", "--config", "x.yaml"]) == ("mae", ["fit", "--config", "x.yaml"])
    assert objective_and_rest(["--objective", "simdino", "fit"]) == ("simdino", ["fit"])
    assert objective_and_rest(["--objective=mae", "validate"]) == ("mae", ["validate"])
    # where a user of a LightningCLI puts every other flag: after the subcommand
    assert objective_and_rest(["fit", "--objective", "simdino", "--config", "x.yaml"]) == (
        "simdino",
        ["fit", "--config", "x.yaml"],
    )
    assert objective_and_rest(["fit", "--config", "x.yaml", "--objective=simdino"]) == (
        "simdino",
        ["fit", "--config", "x.yaml"],
    )


def test_an_unknown_objective_is_one_line_and_status_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        objective_and_rest(["--objective", "byol", "fit"])
    assert exit_info.value.code == 2
    assert (
        capsys.readouterr().err.strip()
        == "pretrain.py: error: unknown objective 'byol'; choose one of ['mae', 'simdino']"
    )
    with pytest.raises(SystemExit) as exit_info:
        objective_and_rest(["fit", "--objective"])  # the name left out
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == "pretrain.py: error: --objective takes a name: one of ['mae', 'simdino']"


def test_simdino_without_multi_crop_views_is_refused_in_one_line(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for label in ("a", "b"):
            folder = tmp_path / "images" / split / label
            folder.mkdir(parents=True)
            for i in range(4):
                Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    from conftest import run_in_process

    proc = run_in_process(
        "--objective", "simdino", "fit", "--config", str(REPO / "configs/simdino/crate_nano_cifar10.yaml"),
        "--data.init_args.root", str(tmp_path / "images"), "--data.init_args.multi_crop", "null",
        "--log_root", str(tmp_path / "logs"), "--trainer.max_steps", "1", program="pretrain.py",
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert (
        last.startswith("pretrain.py: error: self-distillation trains on multi-crop views")
        and "Traceback" not in proc.stderr
    )


@pytest.mark.parametrize(
    ("program", "objective", "config", "meant"),
    [
        ("train.py", [], "configs/crate_mae_nano_digits.yaml", "MaskedAutoencoder"),
        ("train.py", [], "configs/simdino/crate_nano_cifar10.yaml", "SelfDistillation"),
        ("pretrain.py", [], "configs/crate_nano_digits.yaml", "ImageClassifier"),
        ("pretrain.py", [], "configs/simdino/crate_nano_cifar10.yaml", "SelfDistillation"),
        ("pretrain.py", ["--objective", "simdino"], "configs/crate_mae_nano_digits.yaml", "MaskedAutoencoder"),
    ],
)
def test_a_config_given_to_another_program_names_the_command_that_takes_it(
    program: str, objective: list[str], config: str, meant: str
) -> None:
    """A config whose model settings only another program's module takes (a SimDINO config without --objective
    simdino, a masked-pretraining one to train.py): below the CLI's line, the command to run it with and the
    settings that tell, computed here from the config and the modules' signatures."""
    import inspect

    import yaml
    from conftest import run_in_process

    import crate.lit
    from crate.run.record import PROGRAMS

    given = {"train.py": crate.lit.ImageClassifier, "pretrain.py": OBJECTIVES[objective[1] if objective else "mae"]}
    keys = set(yaml.safe_load((REPO / config).read_text())["model"])
    foreign = sorted(keys - set(inspect.signature(given[program]).parameters))
    assert foreign and keys <= set(inspect.signature(getattr(crate.lit, meant)).parameters)
    proc = run_in_process(*objective, "fit", "--config", str(REPO / config), "--print_config", program=program)
    command = {"MaskedAutoencoder": "pretrain.py --objective mae"}.get(meant, PROGRAMS[meant])  # named, not implied
    assert command != " ".join([program, *objective])  # not the command that was given
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        f"{program}: the config's model settings ({', '.join(foreign)}) are those of python {command}: "
        "run it with that command"
    )


@pytest.mark.parametrize("case", ["one class", "knn off", "checkpointing off"])
def test_simdino_without_a_k_nn_keeps_its_latest_state_and_says_why(
    tmp_path: Path, caplog, capsys, monkeypatch, case: str
) -> None:
    """Unlabelled images lie in one class folder: SimDINO trains on them, keeps its latest state and says that it
    has no best checkpoint and why (it failed at its first validation, nothing saved). Its export is not scored;
    the white-box report's probes refuse its data, naming the data rather than the sample size. With checkpointing
    off it keeps no checkpoint and says so (it said it kept last.ckpt)."""
    from conftest import run_in_process, write_image_folder

    from crate.export import export_checkpoint

    classes = ("all",) if case == "one class" else ("a", "b")
    root = write_image_folder(tmp_path / "images", classes, 8, val_per_class=4, size=32, gray=False)
    extra = ["--model.knn_bank", "0"] if case != "one class" else []
    extra += ["--trainer.enable_checkpointing", "false"] if case == "checkpointing off" else []
    with caplog.at_level(logging.INFO):
        proc = run_in_process(
            "--objective", "simdino", "fit", "--config", str(REPO / "configs/simdino/crate_nano_cifar10.yaml"),
            "--data.root", str(root), "--data.batch_size", "4", "--model.model_kwargs", "{depth: 1}",
            "--trainer.max_epochs", "2", "--trainer.enable_progress_bar", "false", "--log_root", str(tmp_path / "logs"),
            *extra, program="pretrain.py",
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    why = "the data has 1 class" if case == "one class" else "--model.knn_bank 0 turns the k-NN evaluation off"
    kept = "no checkpoint (checkpointing is off)" if case == "checkpointing off" else "its latest state (last.ckpt)"
    said = [record.getMessage() for record in caplog.records if "no best checkpoint" in record.getMessage()]
    assert len(said) == 1 and said[0].startswith(f"no val/knn_acc and no best checkpoint: {why}"), said
    assert said[0].endswith(f"; the run keeps {kept}"), said
    checkpoints = tmp_path / "logs" / "simdino_crate_nano_cifar10" / "version_0" / "checkpoints"
    if case == "checkpointing off":
        assert not list(tmp_path.rglob("*.ckpt"))
        return
    names = sorted(p.name for p in checkpoints.iterdir())  # the latest state of the last epoch, no best
    assert len(names) == 2 and names[0] == "last.ckpt" and names[1].startswith("latest-epoch001-"), names
    if case == "knn off":
        return
    caplog.clear()
    with caplog.at_level(logging.INFO):  # an evaluation of the run says why it scores nothing
        proc = run_in_process(
            "--objective", "simdino", "validate", "--config", str(checkpoints.parent / "config.yaml"),
            "--ckpt_path", "last", "--trainer.enable_progress_bar", "false", program="pretrain.py",
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert any(record.getMessage().startswith(f"no val/knn_acc: {why}") for record in caplog.records)
    card = export_checkpoint(checkpoints / "last.ckpt", tmp_path / "encoder.safetensors")
    from benchmarks import simdino_eval

    monkeypatch.setattr("sys.argv", ["simdino_eval.py", "--encoder", str(checkpoints / "last.ckpt")])
    with pytest.raises(SystemExit, match="its data has 1 class, and the k-NN and the probe need labelled images"):
        simdino_eval.main()
    assert card.get("frozen_features") is None and "has 1 class" in (tmp_path / "encoder.md").read_text()
    from crate.interpret.__main__ import main

    with pytest.raises(SystemExit) as exited:
        main(["--model", "crate_nano_patch4_32", "--checkpoint", str(tmp_path / "encoder.safetensors"),
              "--out", str(tmp_path / "report")])  # fmt: skip
    assert exited.value.code == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(
            "holds one class only, and the probes need labelled images of two or more: give data of several classes "
            "(--data, --data.root)"
        )
    )
