"""pretrain.py's --objective: the masked autoencoder by default, SimDINO by name, a clear error otherwise."""

from __future__ import annotations

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


def test_a_config_of_another_objective_without_its_flag_names_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """A SimDINO config run without --objective (masked autoencoding by default) is refused with the flag it needs,
    instead of the CLI's 'does not accept option model.head_hidden_dim'; a config of the default objective, and a
    file the CLI itself must report on, pass through."""
    import inspect

    import yaml

    simdino = str(REPO / "configs" / "simdino" / "crate_nano_cifar10.yaml")
    keys = set(yaml.safe_load(Path(simdino).read_text())["model"]) - set(
        inspect.signature(MaskedAutoencoder).parameters
    )
    assert "head_hidden_dim" in keys
    for argv in (["fit", "--config", simdino], ["fit", f"--config={simdino}", "--trainer.max_epochs", "1"]):
        with pytest.raises(SystemExit) as exit_info:
            objective_and_rest(argv)
        error = capsys.readouterr().err
        assert exit_info.value.code == 2 and error.count("\n") == 1
        assert f"model settings ({', '.join(sorted(keys))}) are those of the simdino objective" in error
        assert error.endswith("add --objective simdino (the default is mae, masked autoencoding)\n")
    mae = str(REPO / "configs" / "crate_mae_nano_digits.yaml")
    assert objective_and_rest(["fit", "--config", mae]) == ("mae", ["fit", "--config", mae])
    assert objective_and_rest(["fit", "--config", "missing.yaml"]) == ("mae", ["fit", "--config", "missing.yaml"])
