"""SimDINO self-distillation of any zoo backbone as a LightningModule (``pretrain.py --objective simdino``).

A student backbone and projection head see every multi-crop view of a batch (the DataModule's
``multi_crop`` setting, :class:`crate.data.MultiCrop`); a teacher, the student's moving average, sees the
global views. The loss is :func:`crate.metrics.simdino_loss` of their L2-normalised head outputs: pull each
image's views together (compression) while keeping the batch's features spread (the coding rate,
expansion). No labels are used in training. The teacher's backbone is ``self.model``: what the checkpoint
reader, ``crate.export`` and the coding-rate monitor take, and what the k-NN evaluation measures: after each
validation epoch, validation images' teacher features vote with DINO's weighted k-NN (:mod:`crate.metrics.knn`)
over the features of ``knn_bank`` training images (un-augmented, a seeded class-mixed sample), logged as
``val/knn_acc``.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import lightning as L
import torch
from torch import nn

from crate.data import PADDING_LABEL
from crate.layers import ProjectionHead
from crate.metrics import simdino_loss
from crate.metrics.knn import weighted_knn_accuracy
from crate.models import check_model_kwargs, create_classifier

from .data.folder import DataError
from .optimization import TimmOptimization
from .run_record import RunRecord
from .step_logging import StepLogging, epoch_loss_metric, logs_this_step

__all__ = ["SelfDistillation"]


class SelfDistillation(RunRecord, StepLogging, TimmOptimization, L.LightningModule):
    """SimDINO pretraining of ``model_name``'s backbone.

    Args:
        model_name: any zoo backbone (built without a classifier; ``dynamic_img_size`` where the family has it,
            so that local views of another size pass).
        num_classes: linked from the DataModule; used only by the k-NN evaluation (no classifier is trained).
        in_chans: linked from the DataModule.
        img_size: linked from the DataModule (the global views' side).
        model_kwargs: further constructor arguments of the backbone.
        head_hidden_dim: width of the projection head's hidden layers.
        head_dim: width of the head's output, the features of the loss.
        head_layers: linear layers of the head.
        eps: the coding rate's eps (SimDINO: 0.5).
        coeff: weight of the compression term (SimDINO: 1).
        expa_type: 1: the rate of the mean of student and teacher global features; 0: of the student's.
        reduce_cov: sum the covariance over DDP processes before the log-determinant.
        teacher_momentum: the teacher's first moving-average momentum, raised to 1 over training by a cosine.
        optimizer: a timm optimizer name (``crate.lit.optimization``).
        lr: peak learning rate after warmup.
        min_lr_ratio: final learning rate as a fraction of ``lr``.
        weight_decay: decoupled weight decay on weight matrices.
        betas: the betas of Adam-like optimizers.
        layer_decay: layer-wise learning-rate decay, None for none.
        warmup_epochs: linear warmup length in epochs, then cosine decay per step.
        knn_k: neighbours of the k-NN evaluation (DINO: 20).
        knn_temperature: temperature of the k-NN vote (DINO: 0.07).
        knn_bank: training images whose features form the k-NN bank (0: the k-NN evaluation is off).
    """

    checkpoint_monitor = ("val/knn_acc", "max")
    refused_subcommands = {
        "predict": "a self-distilled encoder predicts no classes; probe it (benchmarks/simdino_eval.py) or fine-tune "
        "it with train.py --model.pretrained_file PATH and predict with that run",
        "test": "a self-distilled encoder has no classifier to test; benchmarks/simdino_eval.py scores its k-NN "
        "and linear-probe accuracy",
    }

    def __init__(
        self,
        model_name: str = "crate_nano_patch4_32",
        num_classes: int = 0,
        in_chans: int = 3,
        img_size: int | None = None,
        model_kwargs: dict[str, Any] | None = None,
        head_hidden_dim: int = 512,
        head_dim: int = 128,
        head_layers: int = 3,
        eps: float = 0.5,
        coeff: float = 1.0,
        expa_type: int = 1,
        reduce_cov: bool = False,
        teacher_momentum: float = 0.996,
        optimizer: str = "adamw",
        lr: float = 5.0e-4,
        min_lr_ratio: float = 0.01,
        weight_decay: float = 0.04,
        betas: tuple[float, float] = (0.9, 0.999),
        layer_decay: float | None = None,
        warmup_epochs: float = 10.0,
        knn_k: int = 20,
        knn_temperature: float = 0.07,
        knn_bank: int = 10_000,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["num_classes"])  # no classifier: the checkpoint must not claim one
        self.train_loss_mean = epoch_loss_metric()
        self.check_optimization()
        if not 0.0 <= teacher_momentum <= 1.0:
            raise ValueError(f"teacher_momentum must lie in [0, 1], got {teacher_momentum}")
        if knn_bank < 0 or knn_k < 1 or knn_temperature <= 0:
            raise ValueError(
                f"need knn_bank >= 0, knn_k >= 1 and knn_temperature > 0; got {knn_bank}, {knn_k}, {knn_temperature}"
            )
        if expa_type not in (0, 1) or eps <= 0:
            raise ValueError(f"need expa_type 0 or 1 and eps > 0; got {expa_type}, {eps}")
        self.num_classes = num_classes
        check_model_kwargs(model_kwargs)
        kwargs = dict(model_kwargs or {})
        self.student = self._backbone(model_name, in_chans, img_size, kwargs)
        self.record_settings_from_file(model_name, kwargs)
        self.student_head = ProjectionHead(self.student.num_features, head_hidden_dim, head_dim, head_layers)
        self.model = copy.deepcopy(self.student).requires_grad_(False)  # the teacher's backbone
        self.teacher_head = copy.deepcopy(self.student_head).requires_grad_(False)
        self._val_features: list[torch.Tensor] = []
        self._val_labels: list[torch.Tensor] = []

    @staticmethod
    def _backbone(model_name: str, in_chans: int, img_size: int | None, kwargs: dict[str, Any]) -> nn.Module:
        if "dynamic_img_size" not in kwargs:
            try:  # local views are smaller than global ones: a family that can take them does
                return create_classifier(model_name, 0, in_chans, img_size, dynamic_img_size=True, **kwargs)
            except (TypeError, ValueError) as err:  # an unknown argument, or one the family refuses (CRATE-MAE)
                if "dynamic_img_size" not in str(err):
                    raise
        return create_classifier(model_name, 0, in_chans, img_size, **kwargs)

    def on_train_epoch_start(self) -> None:
        """The teacher runs in evaluation mode (no dropout or drop-path; a stem's BatchNorm statistics are the
        student's, copied after each step); Lightning restores that mode after each validation."""
        self.model.eval()
        self.teacher_head.eval()

    def trained_module(self) -> nn.Module:
        return nn.ModuleList([self.student, self.student_head])

    def weight_average_advice(self) -> str:
        return "the teacher, which validation, checkpoints and export read, is already the student's moving average"

    def evaluated_model(self) -> nn.Module:
        return self.model

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """The teacher backbone's pooled features (B, d): what is evaluated and exported."""
        return self.model(images)

    def setup(self, stage: str) -> None:
        data = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        classes = getattr(data, "num_classes", None)
        if isinstance(classes, int) and classes != self.num_classes:
            if self.num_classes:  # the k-NN's votes would have no column for a class the data has
                raise ValueError(
                    f"the data has {classes} classes and the k-NN evaluation was given num_classes="
                    f"{self.num_classes}: leave it out (it is the data's) or give {classes}"
                )
            self.num_classes = classes  # not given (a module built in Python): the data's, as train.py links it
        if stage == "fit" and getattr(data, "multi_crop", None) is None:
            raise DataError(
                "self-distillation trains on multi-crop views: give the DataModule a multi_crop setting "
                "(a tensor-store DataModule, e.g. data.init_args.multi_crop: {global_crops: 2, local_crops: 8}; "
                "configs/simdino/ has examples)"
            )
        views = getattr(data, "multi_crop", None)
        # a transformer built for one size (timm's fixed_input_size) unless it takes any (dynamic_img_size); a
        # convolutional network takes any size
        fixed = self.student.pretrained_cfg.get("fixed_input_size", False) and not getattr(
            self.student, "dynamic_img_size", False
        )
        if (
            stage == "fit"
            and views is not None
            and views.local_crops
            and views.local_size != views.global_size
            and fixed
        ):
            size = views.global_size
            raise DataError(
                f"{self.hparams.model_name} takes {size}x{size} images only (it has no dynamic_img_size), and the "
                f"local views are {views.local_size}x{views.local_size}: give --data.multi_crop.local_size {size}"
            )

    def on_train_start(self) -> None:
        """What every step's teacher update reads, gathered once: the run's step count and the parameter
        pairs."""
        super().on_train_start()
        self._total_steps = max(1, int(self.trainer.estimated_stepping_batches))
        self._teacher_params = [*self.model.parameters(), *self.teacher_head.parameters()]
        self._student_params = [*self.student.parameters(), *self.student_head.parameters()]
        self._taught_step = self.global_step  # a resumed teacher already holds this step's update

    def teacher_momentum_now(self) -> float:
        """The cosine schedule from ``teacher_momentum`` at the first step to 1 at the last."""
        progress = min(self.global_step / self._total_steps, 1.0)
        start = self.hparams.teacher_momentum
        return 1.0 - (1.0 - start) * (math.cos(math.pi * progress) + 1.0) / 2.0

    def training_step(
        self, batch: tuple[tuple[torch.Tensor, torch.Tensor | None], Any], batch_idx: int
    ) -> torch.Tensor:
        views = batch[0]
        if isinstance(views, torch.Tensor):
            raise ValueError("self-distillation got single images, not multi-crop views: set data.init_args.multi_crop")
        globals_, locals_ = views
        student = [self.student_head(self.student(globals_))]
        if locals_ is not None:
            student.append(self.student_head(self.student(locals_)))
        student_feat = torch.cat(student)
        with torch.no_grad():
            teacher_feat = self.teacher_head(self.model(globals_))
        batch_size = len(batch[1])
        loss, compression, expansion = simdino_loss(
            student_feat,
            teacher_feat,
            n_crops=len(student_feat) // batch_size,
            eps=self.hparams.eps,
            coeff=self.hparams.coeff,
            expa_type=self.hparams.expa_type,
            reduce_cov=self.hparams.reduce_cov,
        )
        self.log_training_step(loss, batch_size)
        if logs_this_step(self.trainer):
            self.log("train/compression", compression, batch_size=batch_size)
            self.log("train/expansion", expansion, batch_size=batch_size)
        return loss

    @torch.no_grad()
    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """The teacher moves towards the student once per optimizer step (with accumulated batches, not after
        the batches that only add to the gradient: the student did not change)."""
        if self.global_step == self._taught_step:
            return
        self._taught_step = self.global_step
        torch._foreach_lerp_(self._teacher_params, self._student_params, 1.0 - self.teacher_momentum_now())
        for mine, theirs in zip(self.model.buffers(), self.student.buffers(), strict=True):
            mine.copy_(theirs)  # BatchNorm statistics of a convolutional stem follow the student's

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self._val_features.append(self.model(batch[0]).float())
        self._val_labels.append(batch[1])

    @torch.no_grad()
    def _bank(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher features and labels of ``knn_bank`` un-augmented training images (a seeded sample)."""
        train_set = self.trainer.datamodule.train_set
        count = min(self.hparams.knn_bank, len(train_set))
        order = torch.randperm(len(train_set), generator=torch.Generator().manual_seed(0))[:count]
        features, labels = [], []
        for start in range(0, count, 512):
            items = [train_set[int(i)] for i in order[start : start + 512]]
            images = torch.stack([item[0] for item in items]).to(self.device)
            images = self.trainer.precision_plugin.convert_input(images)  # as Lightning casts a batch ("-true")
            features.append(self.model(images).float())
            labels.append(torch.as_tensor([int(item[1]) for item in items], device=self.device))
        return torch.cat(features), torch.cat(labels)

    @property
    def unscored(self) -> str | None:
        """Why this run logs no ``val/knn_acc`` (and so has no best checkpoint), or None where it does."""
        if not self.hparams.knn_bank:
            return "--model.knn_bank 0 turns the k-NN evaluation off"
        if self.num_classes < 2:
            return (
                f"the data has {self.num_classes} class{'' if self.num_classes == 1 else 'es'}, and the k-NN "
                "evaluation needs labelled images of 2 or more (class folders)"
            )
        return None

    def on_validation_epoch_end(self) -> None:
        features, labels = self._val_features, self._val_labels
        self._val_features, self._val_labels = [], []
        if self.trainer.sanity_checking or not features or self.unscored:
            return
        queries = self.all_gather(torch.cat(features)).flatten(0, -2)
        query_labels = self.all_gather(torch.cat(labels)).flatten()
        kept = query_labels != PADDING_LABEL  # the images that even out the processes' shares count once
        queries, query_labels = queries[kept], query_labels[kept]
        bank, bank_labels = self._bank()
        k = min(self.hparams.knn_k, len(bank))
        accuracy = weighted_knn_accuracy(
            bank, bank_labels, queries, query_labels, self.num_classes, k, self.hparams.knn_temperature
        )
        self.log("val/knn_acc", accuracy, prog_bar=True)  # the same on every process: all features gathered
