"""The LightningModule: image classification with any timm model, trained with timm's own pieces.

Optimizer: ``timm.optim.create_optimizer_v2`` (any timm optimizer name: ``adamw``, ``lion``, ``lamb``,
``sgd``, ...; weight decay on weight matrices only, skipping norms, biases and the model's
``no_weight_decay()``; optional layer-wise learning-rate decay). Schedule: timm's ``CosineLRScheduler``
per optimizer step, linear warmup then cosine decay to ``min_lr_ratio * lr``. Regularisation: label
smoothing, stochastic depth (``drop_path_rate``, every family), Mixup/CutMix (timm's ``Mixup`` with the
soft-target loss), and an exponential moving average of the weights (timm's ``ModelEmaV3``), which is
what validation measures and what checkpoints give to timm and ``crate.export`` when it is on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from timm.data import Mixup
from timm.loss import SoftTargetCrossEntropy
from timm.optim import list_optimizers
from torch import nn
from torchmetrics import MeanMetric, Metric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy

from crate.data import PADDING_LABEL, MixedBatch
from crate.metrics import Top1Accuracy
from crate.models import CheckpointError, check_model_kwargs, create_classifier, read_checkpoint
from crate.run.record import start_weights
from crate.run.weight_average import weight_average

from .layer_objective import LayerObjective
from .mixed_loss import mixed_loss, weighted_soft_target_loss
from .optimization import TimmOptimization
from .run_record import RunRecord
from .step_logging import StepLogging, epoch_loss_metric

__all__ = ["ImageClassifier"]

_COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def _check_settings(hp: Any) -> None:
    """One clear ValueError for a setting of :class:`ImageClassifier` that cannot train, before anything is built."""
    if hp.num_classes < 2:
        raise ValueError(
            f"a classifier needs two or more classes, and the data has {hp.num_classes}: give each class a folder "
            "(train/<class>/<images>), or pretrain on unlabelled images with pretrain.py"
        )
    if hp.optimizer.lower() not in list_optimizers():
        raise ValueError(f"unknown optimizer {hp.optimizer!r}; choose one of timm.optim.list_optimizers()")
    if hp.lr_base_size is not None and hp.lr_base_size < 1:
        raise ValueError(f"lr_base_size must be a batch size >= 1 or None, got {hp.lr_base_size}")
    if hp.lr_base_scale not in ("sqrt", "linear"):
        raise ValueError(f"lr_base_scale must be 'sqrt' or 'linear', got {hp.lr_base_scale!r}")
    if hp.ema_decay is not None and not 0.0 < hp.ema_decay < 1.0:
        raise ValueError(f"ema_decay must lie in (0, 1), got {hp.ema_decay}")
    if not 0.0 <= hp.drop_path_rate < 1.0:
        raise ValueError(f"drop_path_rate must lie in [0, 1), got {hp.drop_path_rate}")
    if not 0.0 <= hp.label_smoothing < 1.0:
        raise ValueError(f"label_smoothing must lie in [0, 1), got {hp.label_smoothing}")
    if hp.mixup_alpha < 0 or hp.cutmix_alpha < 0:
        raise ValueError(
            f"mixup_alpha and cutmix_alpha must be >= 0 (0: off), got {hp.mixup_alpha} and {hp.cutmix_alpha}"
        )
    if hp.compile_mode is not None and hp.compile_mode not in _COMPILE_MODES:
        raise ValueError(f"compile_mode must be one of {_COMPILE_MODES} or None, got {hp.compile_mode!r}")
    if hp.objective_weight < 0 or hp.objective_images < 1:
        raise ValueError(
            f"objective_weight must be >= 0 (0: off) and objective_images >= 1, got {hp.objective_weight}, "
            f"{hp.objective_images}"
        )
    idle = {"objective_weight": hp.objective_weight, "drop_path_rate": hp.drop_path_rate}  # they act on the backbone
    if hp.freeze_backbone and (named := [f"{key} {value}" for key, value in idle.items() if value > 0]):
        raise ValueError(
            f"freeze_backbone trains the head alone, and {' and '.join(named)} would act on the frozen backbone "
            "(its weights do not train, and it stays in evaluation mode), changing nothing: leave them at 0 for a "
            "probe"
        )
    given = hp.model_kwargs or {}
    check_model_kwargs(given)
    if hp.pretrained_file is not None and (given.get("pretrained") or given.get("pretrained_cfg_overlay")):
        raise ValueError(
            f"the start weights are given twice, by pretrained_file ({hp.pretrained_file}) and by model_kwargs "
            "(pretrained, pretrained_cfg_overlay), and only the file's would load: give one of them"
        )
    if hp.class_weights is not None and len(hp.class_weights) != hp.num_classes:
        raise ValueError(f"class_weights has {len(hp.class_weights)} weights for {hp.num_classes} classes")


class ImageClassifier(RunRecord, StepLogging, TimmOptimization, L.LightningModule):
    """Image classification with any timm model name (zoo or timm's own).

    Args:
        model_name: a timm model name, e.g. ``crate_nano_patch4_32`` or ``resnet18``.
        num_classes: linked from the DataModule by ``train.py``.
        in_chans: linked from the DataModule by ``train.py``.
        img_size: linked from the DataModule by ``train.py``.
        model_kwargs: further keyword arguments of the model constructor (e.g. ``drop_rate``).
        optimizer: a timm optimizer name (``timm.optim.list_optimizers()``): ``adamw``, ``lion``, ...
        lr: peak learning rate after warmup.
        min_lr_ratio: final learning rate as a fraction of ``lr``.
        lr_base_size: when set, ``lr`` is the peak at this global batch size, scaled to the run's (e.g. 128:
            a recipe tuned at batch 128 on a CPU, run at batch 512 on a GPU); None: ``lr`` as given.
        lr_base_scale: how ``lr`` follows the batch size: ``sqrt`` (Adam-like optimizers) or ``linear``.
        weight_decay: decoupled weight decay on weight matrices (norms, biases, embeddings skipped).
        betas: the betas of Adam-like optimizers and Lion.
        layer_decay: layer-wise learning-rate decay (e.g. 0.75 for fine-tuning), None for none.
        warmup_epochs: linear warmup length in epochs (fractions allowed), then cosine decay per step.
        label_smoothing: label smoothing of the cross-entropy loss (and of Mixup's soft targets).
        class_weights: the training loss's weight of each class (None: unweighted); ``train.py`` links it to
            the data's (an image folder with strongly imbalanced classes weighs them by inverse frequency).
        objective_weight: weight of the layer-objective term (:mod:`crate.lit.layer_objective`: each CRATE
            attention step rewarded for its rate-reduction gain per unit of its size, each ISTA code for its
            sparsity); 0 (the default) leaves it out.
        objective_images: how many images of each batch the term reads (2 by default: a training step with
            the term then costs at most 1.3x one without it, in fp32 and bf16, ``benchmarks/layer_objective_cost.py``;
            with 2 images the term still makes every layer beat its nulls, ``docs/objective_tradeoff.md``).
        drop_path_rate: stochastic depth, growing linearly to this rate over the blocks.
        ema_decay: the highest decay of the exponential moving average of the weights (e.g. 0.999), None for
            none; validation and test use the average. The decay warms up as timm's ``ModelEmaV3`` with
            ``use_warmup``: at optimizer step n it is ``min(ema_decay, 1 - n**(-2/3))``, so it reaches 0.999 only
            at step 31,623 and 0.9998 at step 353,554.
        mixup_alpha: Beta parameter of Mixup (0 disables it).
        cutmix_alpha: Beta parameter of CutMix (0 disables it).
        mixup_prob: the share of batches mixed.
        grad_checkpointing: recompute activations in the backward pass (less memory, more compute),
            for models with ``set_grad_checkpointing`` (all of the zoo and timm's transformers).
        compile: compile the model's forward with ``torch.compile`` when training starts (the first steps
            pay for it: tens of seconds on a CPU). The model is compiled in place (``nn.Module.compile``),
            so checkpoints, timm and export see the plain module's parameter names; the moving average and
            the coding-rate monitor run eagerly. compile_mode: ``torch.compile``'s ``mode``
            (``default``, ``reduce-overhead``, ``max-autotune``, ...).
        pretrained_file: start from the weights of a checkpoint file (any the zoo reads: a Lightning run of
            this module or of the masked pretraining module, a timm or official file), through timm's
            ``pretrained_cfg_overlay``; the head is kept when the file's has ``num_classes`` rows, reset
            otherwise (a file without a head, such as a masked-pretraining run, gets a new one).
        freeze_backbone: train the classifier head only (a linear probe): every other parameter is frozen
            and the backbone runs in eval mode.
    """

    # what the CLI's best-checkpoint callback watches
    checkpoint_monitor = ("val/acc", "max")

    def __init__(
        self,
        model_name: str = "crate_nano_patch4_32",
        num_classes: int = 10,
        in_chans: int = 3,
        img_size: int | None = None,
        model_kwargs: dict[str, Any] | None = None,
        optimizer: str = "adamw",
        lr: float = 1e-3,
        lr_base_size: int | None = None,
        lr_base_scale: str = "sqrt",
        min_lr_ratio: float = 0.01,
        weight_decay: float = 0.05,
        betas: tuple[float, float] = (0.9, 0.999),
        layer_decay: float | None = None,
        warmup_epochs: float = 5.0,
        label_smoothing: float = 0.1,
        drop_path_rate: float = 0.0,
        ema_decay: float | None = None,
        mixup_alpha: float = 0.0,
        cutmix_alpha: float = 0.0,
        mixup_prob: float = 1.0,
        grad_checkpointing: bool = False,
        compile: bool = False,
        compile_mode: str | None = None,
        pretrained_file: str | None = None,
        freeze_backbone: bool = False,
        class_weights: list[float] | None = None,
        objective_weight: float = 0.0,
        objective_images: int = 2,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.check_optimization()
        _check_settings(self.hparams)
        self.model = self._build_model()
        # the average is a submodule: checkpointed with the run, never optimised (it has no gradients)
        self.model_ema = weight_average(self.model, ema_decay) if ema_decay is not None else None
        if self.model_ema is not None:
            self.model_ema.requires_grad_(False)  # DDP would otherwise count its parameters as unused
            # timm leaves the copy in eval mode; in the module's mode instead, Lightning puts it in eval for
            # validation and back afterwards, and does not warn that part of the module starts training in eval
            self.model_ema.train(self.training)
        self._averaged_step = 0  # the optimizer step whose weights the average last took in
        # after the moving average's copy: only the trained model's forward is hooked
        self.layer_objective = LayerObjective(self.model, max_images=objective_images) if objective_weight > 0 else None
        self.mixup = None
        if mixup_alpha > 0 or cutmix_alpha > 0:
            self.mixup = Mixup(
                mixup_alpha=mixup_alpha,
                cutmix_alpha=cutmix_alpha,
                prob=mixup_prob,
                label_smoothing=label_smoothing,
                num_classes=num_classes,
            )
        # the training loss only (val/loss stays comparable across runs); not a checkpointed tensor: hparams hold it
        weight = torch.tensor(class_weights, dtype=torch.float32) if class_weights is not None else None
        self.register_buffer("class_weight", weight, persistent=False)
        self.mixed_criterion = SoftTargetCrossEntropy()
        # the same value as val/acc's MulticlassAccuracy, in 6 tensor operations a step and no read-back
        self.train_acc = Top1Accuracy()
        self.train_loss_mean = epoch_loss_metric()
        # the layer-objective term's epoch mean, weighted by batch size as Lightning weighs a logged tensor
        self.train_objective_mean = epoch_loss_metric() if self.layer_objective is not None else None
        # evaluation: the mean loss and the accuracy per stage, each leaving out a padded batch's filler samples
        self.eval_metrics = nn.ModuleDict(
            {
                stage: MetricCollection(
                    {
                        "loss": MeanMetric(),
                        "acc": MulticlassAccuracy(num_classes, average="micro", ignore_index=PADDING_LABEL),
                    },
                    prefix=f"{stage}/",
                )
                for stage in ("val", "test")
            }
        )

    def _build_model(self) -> nn.Module:
        """The timm model the settings name, with stochastic depth, a pretrained file, a frozen backbone and
        gradient checkpointing where asked."""
        hp = self.hparams
        kwargs = dict(hp.model_kwargs or {})
        if hp.drop_path_rate > 0:
            kwargs["drop_path_rate"] = hp.drop_path_rate
        if hp.pretrained_file is not None:
            held = read_checkpoint(hp.pretrained_file).classes_for(hp.model_name)
            self.start_weights = start_weights(hp.pretrained_file)  # which weights, should the path change later
            kwargs.update(pretrained=True, pretrained_cfg_overlay=dict(file=hp.pretrained_file, num_classes=held or 0))
        model = create_classifier(hp.model_name, hp.num_classes, hp.in_chans, hp.img_size, **kwargs)
        self.record_settings_from_file(hp.model_name, kwargs)
        if hp.freeze_backbone:
            head = {id(p) for p in model.get_classifier().parameters()}
            for param in model.parameters():
                param.requires_grad_(id(param) in head)
        if hp.grad_checkpointing:
            if not hasattr(model, "set_grad_checkpointing"):
                raise ValueError(f"{hp.model_name} does not support gradient checkpointing")
            model.set_grad_checkpointing(True)
        return model

    def setup(self, stage: str) -> None:
        """Refuse, before a step, data of another number of classes than the head has (a larger head would train
        and score outputs no image belongs to without a word, a smaller one fails at the loss on a label it lacks;
        ``train.py`` links the two, a model and a DataModule built apart in Python may differ), a fit whose data
        weighs its classes otherwise than the loss would, and a fit given Mixup both by the model and by the data."""
        data = self.trainer.datamodule
        classes = getattr(data, "num_classes", None)
        if isinstance(classes, int) and classes != self.hparams.num_classes:
            raise ValueError(
                f"the data has {classes} classes and {self.hparams.model_name}'s head {self.hparams.num_classes} "
                f"outputs: build the classifier with num_classes={classes} (the DataModule's num_classes)"
            )
        weights, given = (getattr(data, "class_weights", None), self.hparams.class_weights)
        if stage == "fit" and weights is not None and [float(w) for w in weights] != [float(w) for w in given or []]:
            raise ValueError(
                f"the data weighs its classes {weights} (imbalanced classes) and the classifier was built with "
                f"class_weights={given}: build it with class_weights=data.class_weights, or build the data with "
                "class_weights=None for an unweighted loss"
            )
        if stage == "fit" and self.mixup is not None and getattr(data, "mixing", None) is not None:
            raise MisconfigurationException(
                "Mixup/CutMix is set twice, by the model (mixup_alpha, cutmix_alpha) and by the data (mixing), and "
                "the data's takes the batches it mixes: give one of them"
            )

    def configure_model(self) -> None:
        """Compile in place (once) when asked: the module keeps its parameter names, so its state dict, its
        checkpoints and DDP/FSDP wrapping are those of the eager model."""
        if self.hparams.compile and not getattr(self, "_compiled", False):
            self.model.compile(mode=self.hparams.compile_mode)
            self._compiled = True

    def on_train_epoch_start(self) -> None:
        if self.hparams.freeze_backbone:  # a probe: dropout and stochastic depth off in the frozen backbone
            self.model.eval()
            self.model.get_classifier().train()

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.model(images)

    def training_step(self, batch: tuple[torch.Tensor, ...], batch_idx: int) -> torch.Tensor:
        if isinstance(batch, MixedBatch):  # mixed on the device by the DataModule, partners reversed
            images, targets, lam = batch
            logits = self(images)
            loss = self._with_layer_objective(
                mixed_loss(logits, targets, lam, self.hparams.label_smoothing, self.class_weight), len(images)
            )
            self.train_acc.update(logits, targets)
            self.log_training_step(loss, len(images), **self._epoch_figures())
            return loss
        images, targets = batch
        if self.mixup is not None and len(images) % 2 == 0:  # timm's Mixup pairs the samples of a batch
            mixed, soft_targets = self.mixup(images, targets)
            logits = self(mixed)
            if self.class_weight is None:
                loss = self.mixed_criterion(logits, soft_targets)
            else:  # timm's loss has no class weights
                loss = weighted_soft_target_loss(logits, soft_targets, self.class_weight)
        else:
            logits = self(images)
            loss = nn.functional.cross_entropy(
                logits, targets, weight=self.class_weight, label_smoothing=self.hparams.label_smoothing
            )
        self.train_acc.update(logits, targets)  # the epoch's value only: no per-batch accuracy computed
        loss = self._with_layer_objective(loss, len(images))
        self.log_training_step(loss, len(images), **self._epoch_figures())
        return loss

    def _epoch_figures(self) -> dict[str, Metric]:
        """The epoch metrics besides the loss: ``train/acc``, and ``train/layer_objective`` where the term is on."""
        if self.train_objective_mean is None:
            return {"acc": self.train_acc}
        return {"acc": self.train_acc, "layer_objective": self.train_objective_mean}

    def _with_layer_objective(self, loss: torch.Tensor, batch_size: int) -> torch.Tensor:
        """The loss with the layer-objective term (``objective_weight`` > 0; :mod:`crate.lit.layer_objective`),
        whose value is logged each epoch as ``train/layer_objective``."""
        if self.layer_objective is None:
            return loss
        term = self.layer_objective.term()
        # the term once per sample: MeanMetric without its NaN check drops a weight given to it (torchmetrics#3434)
        self.train_objective_mean.update(term.detach().expand(batch_size))
        return loss + self.hparams.objective_weight * term

    def on_train_start(self) -> None:
        super().on_train_start()  # the schedule's own start (a resume onto more epochs anneals over them)
        self._averaged_step = self.global_step  # a resumed average already holds this step's weights

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        # once per optimizer step, as timm's training loop averages: under gradient accumulation the weights
        # change on a window's last batch only, and averaging them at every batch would shorten the average
        if self.model_ema is not None and self.global_step != self._averaged_step:
            self.model_ema.update(self.model, step=self.global_step)
            self._averaged_step = self.global_step

    def evaluated_model(self) -> nn.Module:
        """The weights validation, test and predict measure: the moving average when it is on."""
        return self.model_ema.module if self.model_ema is not None else self.model

    def _eval_step(self, batch: tuple[torch.Tensor, torch.Tensor], stage: str) -> None:
        """Loss and accuracy of an evaluation batch; samples labelled ``PADDING_LABEL`` (a padded last batch,
        :func:`crate.data.pad_batch`, or the copies that even out the processes' shares) are left out of both,
        without reading anything back to the host."""
        images, targets = batch
        logits = self.evaluated_model()(images)
        kept = targets != PADDING_LABEL
        # the held-out labels' plain cross-entropy, as timm's validation measures it: label smoothing is a
        # training setting, and a smoothed loss cannot fall below a floor that depends on it
        losses = nn.functional.cross_entropy(logits, targets.clamp(min=0), reduction="none")
        metrics = self.eval_metrics[stage]
        metrics["loss"].update(losses, weight=kept.to(losses.dtype))
        metrics["acc"].update(logits, targets)
        self.log(f"{stage}/loss", metrics["loss"], prog_bar=stage == "val")
        self.log(f"{stage}/acc", metrics["acc"], prog_bar=True)

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self._eval_step(batch, "val")

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self._eval_step(batch, "test")

    def predict_step(self, batch: Any, batch_idx: int) -> dict[str, torch.Tensor | None]:
        """Class probabilities (and the labels where the batch has them), for the PredictionWriter: the softmax of
        the logits in float32, also where a bf16 run's logits are bf16 (a bf16 softmax rounds each probability to
        about 3 significant digits)."""
        images, labels = (batch[0], batch[1]) if isinstance(batch, (tuple, list)) else (batch, None)
        return {"probabilities": self.evaluated_model()(images).float().softmax(dim=-1), "labels": labels}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Refuse, with what to do, a checkpoint whose tensors do not fit this model (e.g. other classes); keep
        the record of the file the run's weights started from."""
        self.refuse_misfit(checkpoint.get("state_dict", {}), checkpoint.get("hyper_parameters", {}))
        self.keep_start_weights(checkpoint)

    def refuse_misfit(self, state_dict: Mapping[str, torch.Tensor], saved: Mapping[str, Any]) -> None:
        """Raise :class:`CheckpointError` where a tensor of ``state_dict`` (this module's key names) has another
        shape here; ``saved``: the checkpoint's hyper-parameters, to say how it was trained. The CLI calls it
        before a run writes anything, Lightning again when it restores the checkpoint."""
        own = self.state_dict()
        wrong = [
            f"{k}: checkpoint {tuple(v.shape)}, this run {tuple(own[k].shape)}"
            for k, v in state_dict.items()
            if k in own and tuple(v.shape) != tuple(own[k].shape)
        ]
        if wrong:
            trained = {key: saved.get(key) for key in ("model_name", "num_classes", "in_chans", "img_size")}
            differ = [
                f"{key}={value!r} (this run {self.hparams.get(key)!r})"
                for key, value in trained.items()
                if value is not None and value != self.hparams.get(key)
            ] or [f"{key}={value!r}" for key, value in trained.items()]
            raise CheckpointError(
                f"the checkpoint does not fit this run's model ({'; '.join(wrong[:3])}): it was trained with "
                f"{', '.join(differ)}. Run it with those settings (--model.model_name; the data gives the model "
                "its classes, --data.in_chans and --data.img_size), or train a new run from its weights with "
                "--model.pretrained_file to change them."
            )
