"""The held-out folders' writer: each image lands, unchanged, in the split and class that its row and one seeded
permutation give, from fabricated files in the two source formats."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from benchmarks import held_out_folders


def _written(root: Path) -> dict[int, tuple[str, str, np.ndarray]]:
    return {
        int(path.stem): (path.parent.parent.name, path.parent.name, np.asarray(Image.open(path)))
        for path in root.glob("*/*/*.png")
    }


def test_the_mnist_sample_is_split_by_the_seeded_permutation(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (30, 28, 28), dtype=np.uint8)
    labels = np.arange(30) % 10
    rows = np.concatenate([images.reshape(30, 784), labels[:, None]], axis=1)
    with gzip.open(tmp_path / "mnist.csv.gz", "wt") as handle:
        np.savetxt(handle, rows, fmt="%d", delimiter=",")
    held_out_folders.main(["mnist", str(tmp_path / "mnist.csv.gz"), str(tmp_path / "out"), "--train", "20"])
    written = _written(tmp_path / "out")
    order = np.random.default_rng(0).permutation(30)
    assert sorted(written) == list(range(30))
    for position, index in enumerate(order):
        split, label, pixels = written[int(index)]
        assert split == ("train" if position < 20 else "val") and label == str(labels[index])
        assert np.array_equal(pixels, images[index])


def test_fashion_mnist_idx_files_keep_train_plus_val_images_with_class_names(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    images = rng.integers(0, 256, (25, 28, 28), dtype=np.uint8)
    labels = (np.arange(25) * 3 % 10).astype(np.uint8)
    source = tmp_path / "fashion"
    source.mkdir()
    header = b"\x00\x00\x08\x03" + np.array([25, 28, 28], ">u4").tobytes()
    (source / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(header + images.tobytes()))
    label_header = b"\x00\x00\x08\x01" + np.array([25], ">u4").tobytes()
    (source / "train-labels-idx1-ubyte.gz").write_bytes(gzip.compress(label_header + labels.tobytes()))
    args = ["fashion", str(source), str(tmp_path / "out"), "--train", "12", "--val", "5", "--seed", "3"]
    held_out_folders.main(args)
    written = _written(tmp_path / "out")
    order = np.random.default_rng(3).permutation(25)[:17]  # train 12 + val 5; the other 8 left out
    assert sorted(written) == sorted(int(i) for i in order)
    for position, index in enumerate(order):
        split, name, pixels = written[int(index)]
        assert split == ("train" if position < 12 else "val")
        assert name == held_out_folders.FASHION_NAMES[labels[index]] and np.array_equal(pixels, images[index])
    with pytest.raises(SystemExit, match="20 \\+ 10 images asked of 25"):
        held_out_folders.main(["fashion", str(source), str(tmp_path / "again"), "--train", "20", "--val", "10"])
