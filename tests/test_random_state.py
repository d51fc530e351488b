"""The random states a checkpoint carries: a resumed run draws what the uninterrupted one drew, on each
process's own accelerator too."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from crate.lit.random_state import RandomStateCheckpoint


def _draws() -> tuple[list[float], list[float], list[float]]:
    return torch.rand(4).tolist(), np.random.rand(4).tolist(), [random.random() for _ in range(4)]


def test_a_restored_state_repeats_the_draws_of_the_moment_it_was_saved() -> None:
    torch.manual_seed(3)
    np.random.seed(3)
    random.seed(3)
    _draws()  # the run so far
    saved = RandomStateCheckpoint().state_dict()
    expected = _draws()
    resumed = RandomStateCheckpoint()
    torch.manual_seed(9)  # a new process, seeded as it starts
    np.random.seed(9)
    random.seed(9)
    resumed.load_state_dict(saved)
    assert _draws() != expected  # nothing is set back before the first training batch
    resumed.on_train_batch_start(None, None, None, 0)  # type: ignore[arg-type]
    assert _draws() == expected


class _Devices:
    """Two accelerators' generator states as one process sees them, ``current`` its own device."""

    def __init__(self, states: dict[int, torch.Tensor], current: int) -> None:
        self.states, self.current = dict(states), current

    def index(self, device: int | str) -> int:
        return self.current if device == "cuda" else int(device)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        cuda = torch.cuda
        monkeypatch.setattr(cuda, "is_available", lambda: True)
        monkeypatch.setattr(cuda, "is_initialized", lambda: True)
        monkeypatch.setattr(cuda, "current_device", lambda: self.current)
        monkeypatch.setattr(cuda, "get_rng_state", lambda device="cuda": self.states[self.index(device)].clone())
        monkeypatch.setattr(cuda, "get_rng_state_all", lambda: [self.states[i].clone() for i in sorted(self.states)])

        def set_one(new_state: torch.Tensor, device: int | str = "cuda") -> None:
            self.states[self.index(device)] = new_state.clone()

        def set_all(new_states: list[torch.Tensor]) -> None:
            for i, new_state in enumerate(new_states):
                self.states[i] = new_state.clone()

        monkeypatch.setattr(cuda, "set_rng_state", set_one)
        monkeypatch.setattr(cuda, "set_rng_state_all", set_all)


def test_each_process_resumes_its_own_device_s_stream_from_rank_zero_s_file(monkeypatch) -> None:
    # two DDP processes seeded alike: each drew N numbers on its own GPU (state "advanced") and none on the
    # other's, which it sees at the seed's state ("fresh"); rank 0 writes the file
    fresh, advanced = torch.zeros(16, dtype=torch.uint8), torch.full((16,), 7, dtype=torch.uint8)
    rank0 = _Devices({0: advanced, 1: fresh}, current=0)
    rank0.install(monkeypatch)
    saved = RandomStateCheckpoint().state_dict()
    rank1 = _Devices({0: fresh, 1: torch.full((16,), 1, dtype=torch.uint8)}, current=1)  # a new process, reseeded
    rank1.install(monkeypatch)
    resumed = RandomStateCheckpoint()
    resumed.load_state_dict(saved)
    resumed.on_train_batch_start(None, None, None, 0)  # type: ignore[arg-type]
    assert torch.equal(rank1.states[1], advanced)  # where the uninterrupted rank 1 was
    assert torch.equal(rank1.states[0], fresh)  # rank 0's device untouched by rank 1


def test_a_file_with_every_device_s_states_still_sets_them_all(monkeypatch) -> None:
    devices = _Devices({0: torch.zeros(16, dtype=torch.uint8), 1: torch.zeros(16, dtype=torch.uint8)}, current=0)
    devices.install(monkeypatch)
    saved = RandomStateCheckpoint().state_dict()
    saved["cuda"] = [torch.full((16,), 2, dtype=torch.uint8), torch.full((16,), 5, dtype=torch.uint8)]
    resumed = RandomStateCheckpoint()
    resumed.load_state_dict(saved)
    resumed.on_train_batch_start(None, None, None, 0)  # type: ignore[arg-type]
    assert [int(devices.states[i][0]) for i in (0, 1)] == [2, 5]
