"""timm's results CSV of the shipped tags, against an independent count of their validation predictions."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import timm
import torch

import crate  # noqa: F401
from crate.data.digits import load_digits_tensors
from crate.lit.data.folder import DataRootError
from crate.results import COLUMNS, main, record_on_card, shipped_tags

REPO = Path(__file__).resolve().parents[1]


def test_every_shipped_tag_is_found_and_encoders_are_told_apart() -> None:
    shipped = {p.name[: -len(".safetensors")] for p in (REPO / "checkpoints").glob("*.safetensors")}
    encoders = {tag for tag in shipped if tag.endswith("_simdino")}  # no classifier: no top-1 to report
    assert set(shipped_tags()) == shipped - encoders and len(shipped - encoders) == 21
    assert shipped_tags(classifiers=False) == ["crate_nano_patch4_32.cifar10_simdino"]


def test_an_encoder_asked_for_by_name_is_refused_with_where_its_scores_are(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--out-dir", str(tmp_path), "--tags", "crate_nano_patch4_32.cifar10_simdino"])
    assert exit_info.value.code == 2 and "its card" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_results_csv_counts_top1_and_top5_as_numpy_does(tmp_path: Path, capsys) -> None:
    tags = ["crate_nano_patch4_32.digits", "vit_nano_patch4_32.digits"]
    main(["--out-dir", str(tmp_path), "--tags", *tags])
    with (tmp_path / "results-digits.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert tuple(rows[0]) == COLUMNS and sorted(r["model"] for r in rows) == sorted(tags)
    assert float(rows[0]["top1"]) >= float(rows[1]["top1"])  # best first
    _, val = load_digits_tensors(img_size=32, in_chans=1)  # the split the shipped files record (seed 0)
    for row in rows:
        model = timm.create_model(row["model"], pretrained=True).eval()
        with torch.no_grad():
            logits = model(val.images).double().numpy()
        labels = val.labels.numpy()
        top5 = np.argsort(-logits, axis=1)[:, :5]
        assert float(row["top1"]) == round(100 * np.mean(logits.argmax(1) == labels), 3)
        assert float(row["top5"]) == round(100 * np.mean((top5 == labels[:, None]).any(1)), 3)
        assert float(row["top1_err"]) == pytest.approx(100 - float(row["top1"]), abs=1e-3)
        assert float(row["param_count"]) == round(sum(p.numel() for p in model.parameters()) / 1e6, 2)
        card = json.loads((REPO / "checkpoints" / f"{row['model']}.json").read_text())
        assert float(row["top1"]) == round(100 * card["val_accuracy"], 3)
        assert row["img_size"] == "32" and row["crop_pct"] == "1.0"


def test_tags_asked_for_by_name_replace_their_rows_and_keep_the_others(tmp_path: Path, capsys) -> None:
    # a --data-root does not apply to the digits, which lie in no folder: they are scored as they are, and said so
    tags = ["crate_nano_patch4_32.digits", "vit_nano_patch4_32.digits"]
    main(["--out-dir", str(tmp_path), "--tags", *tags, "--data-root", str(tmp_path)])
    assert capsys.readouterr().err.count("its data lies in no folder; --data-root left aside for it") == 2
    path = tmp_path / "results-digits.csv"
    before = {row["model"]: row for row in csv.DictReader(path.open())}
    path.write_text(path.read_text().replace(before["vit_nano_patch4_32.digits"]["top1"], "12.5", 1))
    main(["--out-dir", str(tmp_path), "--tags", "vit_nano_patch4_32.digits"])  # rescored: its row comes back
    after = list(csv.DictReader(path.open()))
    assert sorted(row["model"] for row in after) == sorted(before)  # one row each, none lost
    assert {row["model"]: row for row in after} == before
    assert float(after[0]["top1"]) >= float(after[1]["top1"])  # still best first


@pytest.mark.parametrize(
    ("tag", "named"),
    [
        ("crate_cct4_3x2_32.cifar1O", "crate_cct4_3x2_32.cifar10"),  # a typo: its tags are named
        ("crate_cct4_3x2_23.cifar10", "crate_cct4_3x2_32.cifar10"),  # an unknown model: the close matches
    ],
)
def test_a_misspelt_tag_is_refused_with_the_names_that_exist(tmp_path: Path, capsys, tag: str, named: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--out-dir", str(tmp_path), "--tags", tag])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and named in err
    assert "checkpoint file" not in err  # crate-results scores tags only: no file to offer
    assert not list(tmp_path.iterdir())


def test_a_misspelt_tag_among_good_ones_is_refused_before_any_is_scored(tmp_path: Path, capsys, monkeypatch) -> None:
    """The good tag before it was scored first (and on --split test its card rewritten), then the run stopped."""
    import crate.results as results

    def evaluate(tag: str, *args):
        raise AssertionError(f"{tag} scored before every tag was checked")

    monkeypatch.setattr(results, "evaluate_tag", evaluate)
    with pytest.raises(SystemExit) as exit_info:
        main(["--out-dir", str(tmp_path), "--tags", "crate_nano_patch4_32.digits", "crate_nano_patch4_32.digit"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("crate-results: error: crate_nano_patch4_32.digit: ")


@pytest.mark.parametrize("tag", ["crate_alpha_base_patch16_224.in21k_ft_in1k", "resnet18.a1_in1k"])
def test_a_tag_the_zoo_does_not_ship_is_refused_before_any_download(
    tmp_path: Path, capsys, monkeypatch, tag: str
) -> None:
    """The authors' CRATE-alpha file on the hub, or timm's own ImageNet tag, was downloaded (a network error
    offline) and then had no held-out data of a run to be scored on: refused up front, naming what scores it."""
    from hub_cache import serve_offline

    import crate.results as results

    serve_offline(monkeypatch, tmp_path / "cache", "someone/else", {})  # offline, and the file not cached

    def evaluate(tag: str, *args):
        raise AssertionError(f"{tag} scored")

    monkeypatch.setattr(results, "evaluate_tag", evaluate)
    with pytest.raises(SystemExit) as exit_info:
        main(["--out-dir", str(tmp_path), "--tags", "crate_nano_patch4_32.digits", tag])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1
    assert err.startswith(f"crate-results: error: {tag}: not one of the zoo's shipped tags")
    assert "train.py validate or crate.interpret" in err
    assert not list(tmp_path.glob("results-*.csv"))


def test_a_shipped_tag_whose_data_is_not_here_is_skipped_by_name_unless_asked_for(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    import crate.results as results

    real = results.evaluate_tag
    missing_weights = False

    def evaluate(tag: str, *args):
        if tag == "vit_nano_patch4_32.digits":  # stands for a CIFAR-10 tag before `make cifar10-data`
            raise DataRootError("ImageFolder root data/cifar10 lacks data/cifar10/train")
        if tag == "crate_nano_patch4_32.digits" and missing_weights:
            raise FileNotFoundError("checkpoint file w.pt does not exist; check the path")
        return real(tag, *args)

    monkeypatch.setattr(results, "evaluate_tag", evaluate)
    monkeypatch.setattr(results, "shipped_tags", lambda: ["crate_nano_patch4_32.digits", "vit_nano_patch4_32.digits"])
    main(["--out-dir", str(tmp_path)])
    assert "skipped vit_nano_patch4_32.digits: its data is not here" in capsys.readouterr().err
    with (tmp_path / "results-digits.csv").open() as handle:
        assert [row["model"] for row in csv.DictReader(handle)] == ["crate_nano_patch4_32.digits"]
    with pytest.raises(SystemExit) as exit_info:
        main(["--out-dir", str(tmp_path), "--tags", "vit_nano_patch4_32.digits"])
    assert (
        exit_info.value.code == 2
        and "lacks data/cifar10/train; --data-root DIR: where it lies now" in capsys.readouterr().err
    )
    missing_weights = True  # a missing weights file is no data-root problem: the flag is not offered
    with pytest.raises(SystemExit) as exit_info:
        main(["--out-dir", str(tmp_path), "--tags", "crate_nano_patch4_32.digits"])
    assert exit_info.value.code == 2 and capsys.readouterr().err == (
        "crate-results: error: crate_nano_patch4_32.digits: checkpoint file w.pt does not exist; check the path\n"
    )


def test_a_run_that_can_score_no_tag_exits_non_zero_and_writes_nothing(tmp_path: Path, capsys, monkeypatch) -> None:
    import crate.results as results

    def evaluate(tag: str, *args):
        raise FileNotFoundError(f"no test split at /nowhere/test (for {tag})")

    monkeypatch.setattr(results, "evaluate_tag", evaluate)
    monkeypatch.setattr(results, "shipped_tags", lambda: ["crate_nano_patch4_32.cifar10", "vit_nano_patch4_32.cifar10"])
    with pytest.raises(SystemExit) as exit_info:
        main(["--out-dir", str(tmp_path), "--split", "test"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("skipped") == 2
    assert "no tag could be scored on test" in err and "make cifar10-data" in err
    assert list(tmp_path.iterdir()) == []


def test_data_without_a_test_split_is_named_once_and_skipped_among_all_tags(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    """Digits has train and validation only: asked for by name on ``--split test``, one line with the tag once;
    among every shipped tag, skipped with the same reason (not "its data is not here")."""
    import crate.results as results

    tag = "crate_nano_patch4_32.digits"
    reason = "its data (crate.lit.DigitsDataModule) has no test split: score it with --split val"
    with pytest.raises(SystemExit) as exit_info:
        main(["--tags", tag, "--split", "test", "--out-dir", str(tmp_path)])
    assert exit_info.value.code == 2 and capsys.readouterr().err == f"crate-results: error: {tag}: {reason}\n"
    monkeypatch.setattr(results, "shipped_tags", lambda: [tag])
    with pytest.raises(SystemExit) as exit_info:
        main(["--split", "test", "--out-dir", str(tmp_path)])
    assert exit_info.value.code == 2 and f"crate-results: skipped {tag}: {reason}\n" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_an_out_dir_that_is_a_file_is_refused_before_any_tag_is_scored(tmp_path: Path, capsys, monkeypatch) -> None:
    import crate.results as results

    def evaluate(tag: str, *args):
        raise AssertionError("scored before the output folder was checked")

    monkeypatch.setattr(results, "evaluate_tag", evaluate)
    (tmp_path / "results").write_text("a file")
    with pytest.raises(SystemExit) as exit_info:
        main(["--tags", "crate_nano_patch4_32.digits", "--out-dir", str(tmp_path / "results")])
    assert exit_info.value.code == 2
    results_file = tmp_path / "results"
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"crate-results: error: --out-dir {results_file}: {results_file} is a file, not a folder; give a folder for "
        "the results"
    )
    assert (tmp_path / "results").read_text() == "a file"


def test_the_test_split_is_scored_through_timm_and_written_on_the_card(tmp_path: Path, monkeypatch) -> None:
    """A stand-in of CIFAR-10's test folder: the figure equals the accuracy of the model on the images normalised
    by hand (32 px, crop 1, mean and std 0.5: the tag's own data config), and lands on a copy of the card."""
    import shutil

    from PIL import Image

    from crate.models.shipped import CIFAR10_CLASSES

    rng = np.random.default_rng(0)
    labels, pixels = [], []
    for index, name in enumerate(CIFAR10_CLASSES):
        (tmp_path / "data" / "test" / name).mkdir(parents=True)
        for i in range(2):
            image = rng.integers(0, 256, size=(32, 32, 3), dtype=np.uint8)
            Image.fromarray(image).save(tmp_path / "data" / "test" / name / f"{i}.png")
            labels.append(index)
            pixels.append(image)
    tag = "crate_nano_patch4_32.cifar10"
    model = timm.create_model(tag, pretrained=True).eval()
    x = torch.tensor(np.stack(pixels), dtype=torch.float32).permute(0, 3, 1, 2) / 255
    with torch.no_grad():
        expected = float((model((x - 0.5) / 0.5).argmax(-1) == torch.tensor(labels)).float().mean())
    cards = tmp_path / "cards"
    cards.mkdir()
    source = Path(timm.models.get_pretrained_cfg(tag).file)
    for suffix in (".json", ".md"):
        shutil.copy(source.with_suffix(suffix), cards / f"{tag}{suffix}")
    monkeypatch.setattr("crate.results._card_folder", lambda tag: cards)
    main(["--tags", tag, "--split", "test", "--data-root", str(tmp_path / "data"), "--out-dir", str(tmp_path)])
    with (tmp_path / "results-cifar10-test.csv").open() as handle:
        (row,) = list(csv.DictReader(handle))
    assert float(row["top1"]) == pytest.approx(100 * expected, abs=1e-6)
    card = json.loads((cards / f"{tag}.json").read_text())
    assert card["test_accuracy"] == pytest.approx(expected) and card["test_images"] == 20
    assert f"**{expected:.4f}** on 20 images" in (cards / f"{tag}.md").read_text()
    with pytest.raises(SystemExit):  # no test folder there: one line, exit 2
        main(["--tags", tag, "--split", "test", "--data-root", str(tmp_path / "nowhere"), "--out-dir", str(tmp_path)])
    # a tag after it whose data has no test split: refused, and the first tag's card is not rewritten before that
    for suffix in (".json", ".md"):
        shutil.copy(source.with_suffix(suffix), cards / f"{tag}{suffix}")
    before = {path.name: path.read_bytes() for path in cards.iterdir()}
    named = ["--tags", tag, "crate_nano_patch4_32.digits", "--split", "test", "--data-root", str(tmp_path / "data")]
    with pytest.raises(SystemExit) as exit_info:
        main([*named, "--out-dir", str(tmp_path / "refused")])
    assert exit_info.value.code == 2 and {path.name: path.read_bytes() for path in cards.iterdir()} == before
    assert list((tmp_path / "refused").iterdir()) == []


def test_the_card_holds_the_test_top1_as_the_fraction_the_row_prints(tmp_path: Path) -> None:
    """72.94 / 100 is 0.7293999999999999 in floating point; the card writes the row's figure, 0.7294."""
    tag = "crate_nano_patch4_32.cifar10"
    source = Path(timm.models.get_pretrained_cfg(tag).file)
    for suffix in (".json", ".md"):
        (tmp_path / f"{tag}{suffix}").write_bytes(source.with_suffix(suffix).read_bytes())
    record_on_card(tag, {"top1": 72.94, "images": 10_000}, tmp_path)
    text = (tmp_path / f"{tag}.json").read_text()
    assert '"test_accuracy": 0.7294,' in text and json.loads(text)["test_images"] == 10_000
    assert "**0.7294** on 10,000 images" in (tmp_path / f"{tag}.md").read_text()


def test_a_data_root_moves_image_folders_only_and_other_data_is_refused(tmp_path: Path, capsys, monkeypatch) -> None:
    """``--data-root`` is where a tag's image folder lies now. The digits lie in no folder: on val the flag leaves
    their figure as it is (once it aborted every tag's run), on test they still have no test split. A folder whose
    val/ holds another number of images than the tag's run held out (its card) is other data: refused by name,
    skipped among all tags, and no row written."""
    from PIL import Image

    import crate.results as results
    from crate.models.shipped import CIFAR10_CLASSES

    digits = "crate_nano_patch4_32.digits"
    main(["--tags", digits, "--data-root", str(tmp_path / "nowhere"), "--out-dir", str(tmp_path / "out")])
    with (tmp_path / "out" / "results-digits.csv").open() as handle:
        (row,) = list(csv.DictReader(handle))
    card = json.loads((REPO / "checkpoints" / f"{digits}.json").read_text())
    assert float(row["top1"]) == round(100 * card["val_accuracy"], 3)
    with pytest.raises(SystemExit) as exit_info:
        main(["--tags", digits, "--split", "test", "--data-root", str(tmp_path), "--out-dir", str(tmp_path / "out")])
    assert exit_info.value.code == 2 and "has no test split" in capsys.readouterr().err

    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for name in CIFAR10_CLASSES:
            (tmp_path / "data" / split / name).mkdir(parents=True)
            for i in range(2):
                pixels = rng.integers(0, 256, size=(32, 32, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(tmp_path / "data" / split / name / f"{i}.png")
    tag = "crate_nano_patch4_32.cifar10"
    held_out = json.loads((REPO / "checkpoints" / f"{tag}.json").read_text())["val_images"]
    assert held_out != 20
    args = ["--data-root", str(tmp_path / "data"), "--out-dir", str(tmp_path / "cifar")]
    with pytest.raises(SystemExit) as exit_info:
        main(["--tags", tag, *args])
    assert exit_info.value.code == 2 and capsys.readouterr().err == (
        f"crate-results: error: {tag}: {tmp_path / 'data' / 'val'} holds 20 validation images, but its run held out "
        f"{held_out:,} (its card; trained on data/cifar10): --data-root names other data than its run's\n"
    )
    monkeypatch.setattr(results, "shipped_tags", lambda: [digits, tag])
    main(args)
    assert f"crate-results: skipped {tag}: {tmp_path / 'data' / 'val'} holds 20" in capsys.readouterr().err
    assert [p.name for p in (tmp_path / "cifar").iterdir()] == ["results-digits.csv"]


def test_an_out_dir_that_cannot_be_made_is_refused_before_any_tag_is_scored(capsys, monkeypatch) -> None:
    import crate.results as results

    monkeypatch.setattr(results, "evaluate_tag", lambda *args: pytest.fail("a tag was scored"))
    with pytest.raises(SystemExit) as exit_info:
        main(["--out-dir", "/proc/no_such_folder", "--tags", "crate_nano_patch4_32.digits"])
    assert exit_info.value.code == 2 and "--out-dir /proc/no_such_folder: cannot create it" in capsys.readouterr().err
