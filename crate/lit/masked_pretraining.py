"""Masked pretraining of a CRATE-MAE (or any model with ``forward_mae``) as a LightningModule.

The loss is the model's: mean squared error on the masked patches of per-patch normalised pixels (MAE's
``norm_pix_loss``). Validation and test mask each image with noise seeded by its position in the split, so
the loss of two epochs, two runs, two batch sizes or two numbers of processes compares the same masks on the
same images. At the end of validation a figure of masked inputs, reconstructions and originals goes to
TensorBoard; the coding-rate monitor measures the encoder (``rate/...``) and, for a model with a decoder, the
decoder on the masked probe (``rate_decoder/...``).
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from torch import nn

from crate.data import PADDING_LABEL, share_positions
from crate.figures import reconstruction_figure
from crate.models import check_model_kwargs, create_classifier, recorded_settings

from .optimization import TimmOptimization
from .run_record import RunRecord
from .step_logging import StepLogging, epoch_loss_metric

__all__ = ["MaskedAutoencoder"]


class MaskedAutoencoder(RunRecord, StepLogging, TimmOptimization, L.LightningModule):
    """Masked-autoencoder pretraining of ``model_name`` (``crate_mae_*``).

    Args:
        model_name: a model with ``forward_mae`` (the zoo's ``crate_mae_*``).
        num_classes: linked from the DataModule by the CLI and not used (pretraining has no labels; the
            checkpoint holds no head).
        in_chans: linked from the DataModule.
        img_size: linked from the DataModule.
        model_kwargs: further constructor arguments (``decoder_depth``: when not given, the decoder the file the
            run starts from records, else the model's released pretraining depth).
        mask_ratio: share of the patches masked per image (exactly ``int(N (1 - mask_ratio))`` kept).
        norm_pix_loss: normalise each target patch to mean 0, variance 1 (MAE's choice).
        optimizer: a timm optimizer name, as ImageClassifier's (``crate.lit.optimization``).
        lr: peak learning rate after warmup.
        min_lr_ratio: final learning rate as a fraction of ``lr``.
        weight_decay: decoupled weight decay on weight matrices.
        betas: the betas of Adam-like optimizers; (0.9, 0.95) as in MAE.
        layer_decay: layer-wise learning-rate decay, None for none.
        warmup_epochs: linear warmup length in epochs, then cosine decay per step.
        figure_images: how many validation images the reconstruction figure shows (0: no figure).
    """

    checkpoint_monitor = ("val/loss", "min")
    # what the CLI refuses up front, with what to do instead
    refused_subcommands = {
        "predict": "a masked autoencoder predicts no classes; probe or fine-tune it with train.py "
        "(configs/crate_mae_nano_digits_probe.yaml, --model.pretrained_file PATH) and predict with that run",
    }

    def __init__(
        self,
        model_name: str = "crate_mae_nano_patch4_32",
        num_classes: int = 0,
        in_chans: int = 3,
        img_size: int | None = None,
        model_kwargs: dict[str, Any] | None = None,
        mask_ratio: float = 0.75,
        norm_pix_loss: bool = True,
        optimizer: str = "adamw",
        lr: float = 1.5e-3,
        min_lr_ratio: float = 0.01,
        weight_decay: float = 0.05,
        betas: tuple[float, float] = (0.9, 0.95),
        layer_decay: float | None = None,
        warmup_epochs: float = 5.0,
        figure_images: int = 8,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["num_classes"])  # no head: the checkpoint must not claim classes
        self.train_loss_mean = epoch_loss_metric()
        self.check_optimization()
        if not 0.0 <= mask_ratio < 1.0:
            raise ValueError(f"mask_ratio must lie in [0, 1), got {mask_ratio}")
        check_model_kwargs(model_kwargs)
        kwargs = dict(model_kwargs or {})
        if "decoder_depth" not in kwargs:  # the registered models are encoders: add the decoder of the file the
            # run starts from, else the released pretraining's
            depth = recorded_settings(model_name, kwargs).get("decoder_depth")
            if depth is None:
                with torch.device("meta"):
                    bare = create_classifier(model_name, 0, in_chans, img_size, **kwargs)
                depth = getattr(bare, "pretraining_decoder_depth", None)
            if depth is not None:
                kwargs["decoder_depth"] = depth
                self.hparams["model_kwargs"] = kwargs  # the checkpoint records the decoder it trained with
        self.model = create_classifier(model_name, 0, in_chans, img_size, **kwargs)
        self.record_settings_from_file(model_name, kwargs)
        if not hasattr(self.model, "forward_mae") or not getattr(self.model, "decoder_depth", 0):
            raise ValueError(
                f"{model_name} is not a masked autoencoder with a decoder; choose a crate_mae_* model "
                "(with decoder_depth > 0)"
            )
        self.model.mask_ratio, self.model.norm_pix_loss = mask_ratio, norm_pix_loss
        self._figure_batch: tuple[torch.Tensor, list[int]] | None = None  # images and their split positions
        self._evaluated = 0  # samples this process has evaluated in the current validation or test epoch

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """The encoder's features (B, 1 + N, d) of the unmasked images."""
        return self.model.forward_features(images)

    def weight_average_advice(self) -> str:
        return "masked pretraining keeps no average of its weights"

    def evaluated_model(self) -> nn.Module:
        return self.model

    def training_step(self, batch: tuple[torch.Tensor, Any], batch_idx: int) -> torch.Tensor:
        loss = self.model.forward_mae(batch[0])[0]
        self.log_training_step(loss, len(batch[0]))
        return loss

    def _noise(self, positions: list[int], device: torch.device) -> torch.Tensor:
        """The masking noise of the images at these split positions: each image's own, seeded by its position."""
        patches = self.model.patch_embed.num_patches
        noise = [torch.rand(patches, generator=torch.Generator().manual_seed(p)) for p in positions]
        return torch.stack(noise).to(device)

    def on_validation_epoch_start(self) -> None:
        self._evaluated = 0

    def on_test_epoch_start(self) -> None:
        self._evaluated = 0

    def _eval_step(self, batch: tuple[torch.Tensor, Any], batch_idx: int, stage: str) -> None:
        """The reconstruction loss of a batch's masked patches; images labelled ``PADDING_LABEL`` (those that
        even out the processes' shares, :class:`crate.data.EvaluationShares`) are left out."""
        images = batch[0]
        positions = share_positions(self._evaluated, len(images))
        self._evaluated += len(images)
        loss, pred, mask = self.model.forward_mae(images, noise=self._noise(positions, images.device))
        labels = batch[1] if len(batch) > 1 and isinstance(batch[1], torch.Tensor) else None
        if labels is not None and not bool((kept := labels != PADDING_LABEL).all()):
            images = images[kept]
            positions = [p for p, keep in zip(positions, kept.tolist(), strict=True) if keep]
            # a batch of copies only still logs (with no weight): every process must sync the same keys
            loss = self.model.reconstruction_loss(images, pred[kept], mask[kept]) if len(images) else loss * 0
        self.log(f"{stage}/loss", loss, prog_bar=stage == "val", sync_dist=True, batch_size=len(images))
        if stage == "val" and batch_idx == 0:
            count = self.hparams.figure_images
            self._figure_batch = images[:count], positions[:count]

    def validation_step(self, batch: tuple[torch.Tensor, Any], batch_idx: int) -> None:
        self._eval_step(batch, batch_idx, "val")

    def test_step(self, batch: tuple[torch.Tensor, Any], batch_idx: int) -> None:
        self._eval_step(batch, batch_idx, "test")

    def on_validation_epoch_end(self) -> None:
        if self._figure_batch is None or self.trainer.sanity_checking or not self.trainer.is_global_zero:
            return
        images, positions = self._figure_batch
        if not len(images):
            return
        loggers = [logger for logger in self.trainer.loggers if isinstance(logger, TensorBoardLogger)]
        if not loggers:
            return
        with torch.no_grad():
            masked, pasted = self.model.masked_views(images, self._noise(positions, images.device))
        figure = reconstruction_figure(images, masked, pasted, title=f"step {self.global_step}")
        for logger in loggers:
            logger.experiment.add_figure("mae/reconstruction", figure, self.global_step)
