"""What every DataModule of the zoo offers: the data's classes, channels and image size, and loaders."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD, resolve_data_config
from torch.utils.data import DataLoader, Dataset

from crate.data import EvaluationSampler, EvaluationShares, ResumableDataLoader, SeededTransformDataset
from crate.errors import DataError
from crate.models.checkpoint import EVAL_TRANSFORM_SETTINGS

__all__ = ["LUMA", "DataError", "ImageDataModule"]

LUMA = (0.299, 0.587, 0.114)  # PIL's weights of R, G, B in its conversion to gray


def _luma_average(values: tuple[float, ...]) -> float:
    """The luma-weighted average of a per-channel statistic; a value shared by the three channels stays exactly
    itself (the weighted sum of 0.5 is 0.49999999999999994, which the cards and config.json would then show)."""
    return float(values[0]) if len(set(values)) == 1 else float(np.dot(LUMA, values))


class ImageDataModule(L.LightningDataModule):
    """Base of the zoo's image DataModules.

    ``train.py`` links ``num_classes``, ``in_chans`` and ``img_size`` of the data to the model.
    Subclasses set ``self.train_set`` (without augmentation), ``self.train_transform``, ``self.val_set``
    and, where the data has one, ``self.test_set`` in ``setup``; ``train.py test`` refuses data without a
    test split (it never silently tests on the validation split), and ``train.py predict`` predicts the
    ``predict_split`` (``val`` by default). The training loader is resumable mid-epoch: sample
    order and augmentation follow from (``seed``, epoch, position), and checkpoints record how many
    batches of the epoch were consumed (:mod:`crate.data.resumable`).
    """

    has_test_split_note = "it has a train and a validation split only"
    # where the validation split is the data's official test split (no other held-out images exist), why: the
    # run summary and the export card say so, since a checkpoint chosen on it has no unbiased test figure
    validates_on_test_split: str | None = None

    def __init__(
        self,
        img_size: int,
        batch_size: int,
        num_workers: int,
        seed: int = 0,
        predict_split: str = "val",
        drop_last: bool = False,
    ) -> None:
        super().__init__()
        if batch_size < 1 or num_workers < 0:
            raise ValueError(f"batch_size must be >= 1 and num_workers >= 0, got {batch_size} and {num_workers}")
        if predict_split not in ("train", "val", "test"):
            raise ValueError(f"predict_split must be 'train', 'val' or 'test', got {predict_split!r}")
        self.predict_split = predict_split
        self.transform_model: Any = None  # a model whose pretrained cfg sets the transforms (see subclasses)
        self.img_size = img_size
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.seed = seed
        self.drop_last = drop_last  # an epoch's last, smaller training batch left out (fixed step shapes)
        self.train_set: Dataset | None = None
        self.train_transform: Callable[[Any], Any] | None = None
        self.val_set: Dataset | None = None
        self.test_set: Dataset | None = None
        self.predict_root: Path | None = None  # a folder of new images to predict instead of a split (image folders)
        self.predict_set: Dataset | None = None
        self._train_loader: ResumableDataLoader | None = None
        self._resume_state: dict[str, int] | None = None
        # the data section of the run's config (class_path, init_args), set by the CLI; checkpoints record
        # it so that their weights are evaluated on the data the run held out
        self.data_config: dict[str, Any] | None = None

    @property
    def num_classes(self) -> int:
        raise NotImplementedError

    @property
    def class_weights(self) -> list[float] | None:
        """The loss's weight of each class, or None for an unweighted loss (folders may weigh imbalanced classes)."""
        return None

    def data_identity(self) -> dict[str, Any]:
        """What the data is, as far as a run's weights depend on it: its source (subclasses add the folder, the
        classes and the split sizes, or the split settings), image size, channels and number of classes.
        Every checkpoint records it, and resuming a run onto data of another identity is refused."""
        return {"img_size": self.img_size, "in_chans": self.in_chans, "num_classes": self.num_classes}

    @property
    def in_chans(self) -> int:
        return 3

    def _loader(self, dataset: Dataset | None, shares: bool) -> DataLoader:
        """An evaluation loader of ``dataset`` in its order. With ``shares`` (validation and test), the processes
        of a distributed run take even shares in which every image counts once (:class:`EvaluationSampler`);
        without (predict), Lightning shares the split and its prediction writer places each prediction."""
        if dataset is None:
            raise RuntimeError(f"{type(self).__name__}.setup() must run before its dataloaders are asked for")
        source, collate = self._evaluation_source(dataset)
        sampler = None
        if shares:
            source, sampler = EvaluationShares(source), EvaluationSampler(len(source))
        return DataLoader(
            source,
            batch_size=self.batch_size,
            sampler=sampler,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            drop_last=False,
            **({"collate_fn": collate} if collate is not None else {}),
        )

    def _evaluation_source(self, dataset: Dataset) -> tuple[Dataset, Callable[[Any], Any] | None]:
        """What an evaluation loader of ``dataset`` reads and its collate function (None: torch's)."""
        return dataset, None

    def _batches_done(self) -> int:
        """Batches of the current epoch the training loop has finished (0 outside a fit)."""
        trainer = self.trainer
        # Lightning 2.6 has no public count of the batches an epoch has finished; its training loop's progress
        # tracker is the one that a resumed run restores, which is what keeps the sampler's position exact
        return trainer.fit_loop.epoch_loop.batch_progress.current.processed if trainer is not None else 0

    def _epoch_batches(self) -> float:
        """Batches the training loop takes from an epoch (``limit_train_batches`` may take fewer than all;
        outside a fit no batch is ever done, so the count does not matter there)."""
        return self.trainer.num_training_batches if self.trainer is not None else float("inf")

    def _seeded_train_set(self) -> tuple[Dataset, Callable[[Any], Any] | None]:
        """The training set keyed by ``(index, sample_seed)`` and its collate function (None: torch's)."""
        return SeededTransformDataset(self.train_set, self.train_transform), None

    def model_data_config(self) -> dict[str, Any]:
        """timm's data config of the model being trained (when attached to a trainer) or of the model given
        to ``transforms_from``, otherwise ImageNet's defaults, at this data's channels and ``img_size``;
        for one channel, mean and std are the luma-weighted averages of three-channel ones."""
        model = self.transform_model
        if model is None and self.trainer is not None and self.trainer.lightning_module is not None:
            model = getattr(self.trainer.lightning_module, "model", None)
        config = resolve_data_config({}, model=model) if isinstance(model, torch.nn.Module) else {}
        config = dict(config, input_size=(self.in_chans, self.img_size, self.img_size))
        mean, std = config.get("mean", IMAGENET_DEFAULT_MEAN), config.get("std", IMAGENET_DEFAULT_STD)
        if self.in_chans == 1 and len(mean) == 3:  # gray is PIL's luma of RGB: weigh the statistics alike
            mean, std = (_luma_average(mean),), (_luma_average(std),)
        return dict(config, mean=tuple(mean), std=tuple(std))

    def eval_transform(self) -> dict[str, Any]:
        """The settings of timm's data config (mean, std, interpolation, crop) whose evaluation transform turns this
        data's images into the tensors validation reads. Checkpoints record them, and a model loaded from such a
        file carries them in its ``pretrained_cfg``, so that ``resolve_data_config`` + ``create_transform`` give
        what its accuracy was measured on. Here the model's own; subclasses that prepare images otherwise say how."""
        config = self.model_data_config()
        return {key: config[key] for key in EVAL_TRANSFORM_SETTINGS if key in config}

    def train_dataloader(self) -> DataLoader:
        if self.train_set is None:
            raise RuntimeError(f"{type(self).__name__}.setup() must run before its dataloaders are asked for")
        dataset, collate = self._seeded_train_set()
        self._train_loader = ResumableDataLoader(
            dataset,
            batch_size=self.batch_size,
            seed=self.seed,
            # Lightning's overfit_batches trains on the same first batches every epoch, in the data's order
            shuffle=not (self.trainer is not None and self.trainer.overfit_batches > 0),
            batches_done=self._batches_done,
            epoch_batches=self._epoch_batches,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            drop_last=self.drop_last,
            **({"collate_fn": collate} if collate is not None else {}),
        )
        if self.drop_last and len(self._train_loader) == 0:  # else the fit ends at once: "No training batches"
            raise DataError(
                f"the {len(dataset):,} training images make no whole batch of {self.batch_size} (drop_last leaves out "
                f"the smaller last one): give --data.batch_size {len(dataset)} or less, or --data.drop_last false"
            )
        if self._resume_state is not None:
            self._train_loader.load_state_dict(self._resume_state)
        return self._train_loader

    # The position in the training epoch travels in the DataModule's own checkpoint state: Lightning's
    # loop-level loader state is not applied when the train loader was built before the restore (which
    # happens whenever configure_optimizers asks for estimated_stepping_batches, as ours does).
    def state_dict(self) -> dict[str, Any]:
        return {"train_loader": self._train_loader.state_dict()} if self._train_loader is not None else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._resume_state = state_dict.get("train_loader")
        if self._resume_state is not None and self._train_loader is not None:
            self._train_loader.load_state_dict(self._resume_state)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, shares=True)

    def has_test_split(self) -> bool:
        """Whether the data has a test split, known before ``setup`` (subclasses without one say so)."""
        return True

    def require_split(self, name: str) -> None:
        """Refuse a split the data does not have (``train.py test`` on data without a test split), before a
        trainer writes anything."""
        if name == "test" and not self.has_test_split():
            raise DataError(
                f"{type(self).__name__} has no test split ({self.has_test_split_note}); "
                "evaluate on the validation split with the `validate` subcommand"
            )

    def _split(self, name: str) -> Dataset | None:
        self.require_split(name)
        return {"train": self.train_set, "val": self.val_set, "test": self.test_set}[name]

    def test_dataloader(self) -> DataLoader:
        return self._loader(self._split("test"), shares=True)

    def predict_dataloader(self) -> DataLoader:
        """``predict_root``'s images where it is given (without labels), else the ``predict_split``; in their
        evaluation form (no augmentation), in order."""
        if self.predict_root is not None:
            return self._loader(self.predict_set, shares=False)
        return self._loader(self._split(self.predict_split), shares=False)

    def transforms_from(self, model: Any) -> None:
        """Take the evaluation transforms from ``model``'s pretrained cfg (as training on it did), for
        evaluating a checkpoint outside a trainer; call before ``setup``."""
        self.transform_model = model
