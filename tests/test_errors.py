"""An error as the one line a person reads, also when it crossed from a DataLoader worker."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from crate.errors import one_line
from crate.lit.data.base import DataError


class _Unreadable(Dataset):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> torch.Tensor:
        if index == 2:
            raise DataError("cannot read image x/2.png (truncated); replace or remove the file")
        return torch.zeros(1)


@pytest.mark.slow  # a worker process
def test_a_worker_s_error_is_its_own_message_on_one_line() -> None:
    loader = DataLoader(_Unreadable(), batch_size=1, num_workers=1)
    try:
        list(loader)
    except DataError as err:
        assert "Original Traceback" in str(err)  # what torch hands the main process
        assert one_line(err) == "cannot read image x/2.png (truncated); replace or remove the file"
    else:
        raise AssertionError("the worker's error did not reach the main process")


def test_a_plain_error_keeps_its_message_with_its_lines_joined() -> None:
    assert one_line(ValueError("first line\n  second line\n")) == "first line second line"
