import csv
from pathlib import Path

import pytest
import yaml

from benchmarks.compare_runs import compare


def _write(path: Path, val: list[float], train: list[float] | None = None) -> Path:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["epoch", "step", "train/acc", "val/acc"])
        for epoch, acc in enumerate(val):
            writer.writerow([epoch, epoch * 10 + 5, "", ""])  # a step row without the epoch's figures
            writer.writerow([epoch, epoch * 10 + 9, train[epoch] if train else "", acc])
    return path


def test_compare_runs_matches_a_hand_count_of_leads_means_and_best(tmp_path: Path) -> None:
    run = _write(tmp_path / "run.csv", [0.5, 0.7, 0.6, 0.9], train=[0.1, 0.2, 0.3, 0.4])
    reference = _write(tmp_path / "ref.csv", [0.6, 0.6, 0.6, 0.8, 0.95])
    result = compare(run, reference, last=2)
    # leads: -0.1, +0.1, 0.0, +0.1 -> ahead in 2 of 4, median of the sorted (-0.1, 0, 0.1, 0.1) is 0.05; the best
    # val (0.9) is the 4th epoch, counted from 1
    assert result["epochs"] == 4 and result["epochs_ahead"] == 2 and result["epochs_compared"] == 4
    assert result["median_lead"] == pytest.approx(0.05)
    assert result["val_last"] == 0.9 and result["val_best"] == 0.9 and result["best_epoch"] == 4
    assert result["val_mean_last"] == pytest.approx(0.75) and result["reference_mean_last"] == pytest.approx(0.7)
    assert result["reference_at_last"] == 0.8 and result["train_last"] == 0.4


def test_compare_runs_over_a_stretch_of_epochs_matches_a_hand_count(tmp_path: Path) -> None:
    run = _write(tmp_path / "run.csv", [0.5, 0.7, 0.6, 0.9, 0.4], train=[0.1, 0.2, 0.3, 0.4, 0.5])
    reference = _write(tmp_path / "ref.csv", [0.6, 0.6, 0.6, 0.8, 0.95])
    result = compare(run, reference, last=2, since=2, until=4)  # epochs 2-4 of 5: indices 1, 2, 3
    # leads: +0.1, 0.0, +0.1 -> ahead in 2 of 3, median 0.1; the 5th epoch's 0.4 is outside the stretch
    assert result["epochs"] == 4 and result["epochs_ahead"] == 2 and result["epochs_compared"] == 3
    assert result["median_lead"] == pytest.approx(0.1)
    assert result["val_last"] == 0.9 and result["best_epoch"] == 4 and result["train_last"] == 0.4
    assert result["val_mean_last"] == pytest.approx(0.75) and result["reference_mean_last"] == pytest.approx(0.7)
    with pytest.raises(SystemExit, match="no val/acc from epoch 6 on"):
        compare(run, reference, since=6)
    with pytest.raises(SystemExit, match="no val/acc from epochs 6 to 7"):
        compare(run, reference, since=6, until=7)
    for since, until in ((0, None), (3, 2), (1, 0)):  # no stretch at all: refused before the logs are read
        with pytest.raises(SystemExit, match="is no stretch"):
            compare(run, reference, since=since, until=until)


def test_compare_runs_refuses_a_file_without_validation_figures(tmp_path: Path) -> None:
    empty = tmp_path / "empty.csv"
    empty.write_text("epoch,step\n0,1\n")
    with pytest.raises(SystemExit, match="logs no val/acc"):
        compare(empty, empty)


def test_compare_runs_refuses_runs_that_validated_on_other_data(tmp_path: Path, capsys) -> None:
    """A run on a 10,000-image subset against one on the whole split: other validation images, so a lead says
    nothing. Refused where the runs' config.yaml files name other data, or one validated on part of the split; the
    same data with another recipe passes."""
    from benchmarks.compare_runs import main

    def run(name: str, root: str, lr: float) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        data = {"class_path": "crate.lit.StoredImageFolderDataModule", "init_args": {"root": root, "batch_size": 64}}
        (folder / "config.yaml").write_text(yaml.safe_dump({"model": {"lr": lr}, "data": data}))
        return _write(folder / "metrics.csv", [0.5, 0.6])

    subset, whole, other_lr = (
        run("subset", "data/cifar10_10k", 1e-3),
        run("whole", "data/cifar10", 1e-3),
        run("lr", "data/cifar10_10k", 2e-3),
    )
    with pytest.raises(SystemExit, match=r"validated on other data \(subset: .*root=data/cifar10_10k.*whole: .*"):
        main([str(subset), str(whole)])
    main([str(subset), str(whole), "--other-data"])
    main([str(subset), str(other_lr)])
    assert capsys.readouterr().out.count("epochs_ahead") == 2
    # the same data, one run validated on part of it (--trainer.limit_val_batches): other images too
    config_file = other_lr.parent / "config.yaml"
    for limit, said in [(3, "the first 3 val batches of 64 images"), (0.25, "0.25 of the val batches")]:
        config = yaml.safe_load(config_file.read_text())
        config_file.write_text(yaml.safe_dump({**config, "trainer": {"limit_val_batches": limit}}))
        with pytest.raises(SystemExit, match=rf"lr: .*root=data/cifar10_10k\), {said}; subset: "):
            main([str(other_lr), str(subset)])
    config_file.write_text(yaml.safe_dump({**config, "trainer": {"limit_val_batches": 1.0}}))
    main([str(other_lr), str(subset)])  # 1.0: the whole split
