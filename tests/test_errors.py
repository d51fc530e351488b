"""An error as the one line a person reads, also when it crossed from a DataLoader worker."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from crate.errors import keys_help, one_line
from crate.lit.data.base import DataError

REPO = Path(__file__).resolve().parents[1]


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


def test_a_key_one_typo_away_from_one_its_class_takes_is_named() -> None:
    """The suggestion is a key of the class the key belongs to: the model's for ``--model.*`` (on the command line
    or in a config), the innermost class_path's for nested data settings, none where nothing is close."""
    import lightning as L

    from crate.lit import ImageClassifier

    sections = {"model": ImageClassifier, "trainer": L.Trainer}
    line = keys_help("unrecognized arguments: --model.lrr 1", "train.py", sections)
    assert line == "python train.py fit --help (or --print_config); did you mean --model.lr?"
    line = keys_help("Subcommand 'fit' does not accept option 'trainer.max_epoch'", "train.py", sections)
    assert line.endswith("; did you mean --trainer.max_epochs?")
    nested = (
        "Parser key \"data\": Problem with given class_path 'crate.lit.StoredImageFolderDataModule': Parser key "
        '"multi_crop": Does not validate against any of the Union subtypes Subtypes: [<class '
        "'crate.data.multi_crop.MultiCrop'>, <class 'NoneType'>]; "
        "Problem with given class_path 'crate.data.MultiCrop': Option 'local_crop' is not accepted"
    )
    line = keys_help(nested, "pretrain.py", sections)
    assert line == (
        "python pretrain.py fit --data.help crate.lit.StoredImageFolderDataModule; did you mean "
        "--data.multi_crop.local_crops?"
    )
    assert keys_help("unrecognized arguments: --model.zzzz 1", "train.py", sections).endswith("--print_config)")
    assert keys_help("unrecognized arguments: --model.lrr 1", "train.py").endswith("--print_config)")  # no classes


def test_a_lightning_callback_missing_a_required_argument_is_named_without_the_union_report(capsys) -> None:
    """--trainer.callbacks+=EarlyStopping without its monitor: jsonargparse's union report put the other
    alternatives (the forms a callback may be given in) and the whole parsed value after the one error that says
    what to change."""
    from crate.lit import cli_main

    with pytest.raises(SystemExit):
        cli_main(
            ["fit", "--config", str(REPO / "configs" / "crate_nano_digits.yaml"), "--trainer.callbacks+=EarlyStopping"]
        )
    error = capsys.readouterr().err.splitlines()[0]
    assert error == (
        'train.py: error: Parser key "trainer.callbacks": Problem with given class_path '
        "'lightning.pytorch.callbacks.EarlyStopping': the following arguments are required: monitor"
    )
