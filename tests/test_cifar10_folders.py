"""CIFAR-10's folders rebuilt from a public copy by the written rule: the val split of a stand-in export equals
the project's archive's val files, and a small export is split, copied and refused as a user would meet it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from crate.data.cifar10_folders import CIFAR10_CLASSES, from_export, main, val_split

ARCHIVE = Path(__file__).resolve().parents[2] / "shared" / "data" / "cifar10-trainval.tar.gz"


def _archive_val_files() -> dict[str, list[str]]:
    listing = subprocess.run(["tar", "-tzf", str(ARCHIVE)], capture_output=True, text=True, check=True).stdout
    files: dict[str, list[str]] = {name: [] for name in CIFAR10_CLASSES}
    for entry in listing.splitlines():
        parts = entry.split("/")  # cifar10/val/<class>/NNNN.jpg
        if len(parts) == 4 and parts[1] == "val" and parts[3]:
            files[parts[2]].append(parts[3])
    return files


@pytest.mark.skipif(not ARCHIVE.is_file(), reason="the project's CIFAR-10 archive is not beside this checkout")
def test_the_rule_on_the_exports_file_names_gives_the_archives_val_split() -> None:
    export_names = {name: [f"{index:04d}.jpg" for index in range(5000)] for name in CIFAR10_CLASSES}
    rebuilt = val_split(export_names)
    archived = _archive_val_files()
    assert {name: sorted(files) for name, files in rebuilt.items()} == {n: sorted(f) for n, f in archived.items()}
    assert sum(len(files) for files in rebuilt.values()) == 5000


def test_a_stand_in_export_is_split_by_the_rule_and_its_test_split_kept(tmp_path: Path) -> None:
    export = tmp_path / "CIFAR-10-images"
    for split, count in (("train", 520), ("test", 3)):
        for name in CIFAR10_CLASSES:
            folder = export / split / name
            folder.mkdir(parents=True)
            for index in range(count):
                (folder / f"{index:04d}.jpg").write_bytes(f"{split}/{name}/{index}".encode())
    counts = from_export(export, tmp_path / "out")
    assert counts == {"train": 200, "val": 5000, "test": 30}
    expected = val_split({name: [f"{i:04d}.jpg" for i in range(520)] for name in CIFAR10_CLASSES})
    for name in CIFAR10_CLASSES:
        assert sorted(p.name for p in (tmp_path / "out" / "val" / name).iterdir()) == sorted(expected[name])
        kept = tmp_path / "out" / "train" / name / "0000.jpg"
        held = "train" if kept.exists() else "val"
        assert (tmp_path / "out" / held / name / "0000.jpg").read_bytes() == f"train/{name}/0".encode()
    assert (tmp_path / "out" / "test" / "truck" / "0002.jpg").read_bytes() == b"test/truck/2"


def test_a_folder_that_is_not_an_export_or_an_existing_output_is_one_line(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--export", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2 and "has no train/ folder" in capsys.readouterr().err
    (tmp_path / "out" / "train").mkdir(parents=True)
    with pytest.raises(SystemExit) as exit_info:
        main(["--export", str(tmp_path), "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2 and "exists; remove it" in capsys.readouterr().err
