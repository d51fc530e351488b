"""benchmarks/input_path.py: its synthetic folder is written once and described, and each device stage is timed over
its own calls (the GPU queue's job, run dry, is checked in ``tests/test_gpu_queue.py``)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.input_path import write_folder


def test_the_folder_is_written_once_and_described(tmp_path: Path) -> None:
    stats = write_folder(tmp_path, 6, processes=2)
    assert stats["images"] == 6 and len(list(tmp_path.glob("val/*/*.jpg"))) == 16
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.jpg")}
    assert write_folder(tmp_path, 6) == stats
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.jpg")} == before  # kept, not rewritten


def test_each_device_stage_is_timed_alone_over_its_own_calls(monkeypatch) -> None:
    """``device_stages`` on a stand-in DataModule whose stages advance a fake clock by known seconds, the first
    call of each (worker start-up, compilation) by 8 s more: each rate is the images of that stage's timed calls
    over their seconds, computed here from the stand-in's costs, its first call left out."""
    import dataclasses

    import torch

    import crate.data
    from benchmarks import input_path

    clock = {"now": 0.0}
    called: set[str] = set()

    def spend(stage: str) -> None:
        clock["now"] += cost[stage] + (8.0 if stage not in called else 0.0)
        called.add(stage)

    cost = {"batch": 0.5, "decode": 0.25, "train": 0.125, "tiny": 0.0625}  # seconds a call; exact in binary
    batch_size, timed = 4, 3

    class Loader:
        def __init__(self) -> None:
            self.left = 2  # two batches an epoch: the timing loop restarts the loader once

        def __iter__(self):
            return self

        def __next__(self) -> dict:
            if self.left == 0:
                raise StopIteration
            self.left -= 1
            spend("batch")
            payloads = [torch.zeros(3, dtype=torch.uint8)] * batch_size
            return {"payloads": payloads, "paths": ["p"] * batch_size, "seeds": torch.arange(batch_size)}

    @dataclasses.dataclass(frozen=True)
    class Transform:
        size: int = 224

        def train(self, images: list, seeds: list) -> None:
            spend("train" if self.size == 224 else "tiny")

    class Data:
        device_transform = Transform()

        def train_dataloader(self) -> Loader:
            return Loader()

    def decode(payloads: list, paths: list, device: torch.device) -> list:
        spend("decode")
        return payloads

    monkeypatch.setattr(crate.data, "decode_batch", decode)
    monkeypatch.setattr(input_path.time, "perf_counter", lambda: clock["now"])
    stages = input_path.device_stages(Data(), torch.device("cpu"), timed)
    assert stages == {
        "bytes_images_s": round(timed * batch_size / (timed * cost["batch"]), 1),
        "decode_images_s": round(timed * batch_size / (timed * cost["decode"]), 1),
        "transform_images_s": round(timed * batch_size / (timed * cost["train"]), 1),
        "transform_host_us_per_image": round(1e6 * timed * cost["tiny"] / (timed * batch_size), 1),
    }
