"""A callback that measures the sparse rate reduction objective layer by layer while a model trains."""

from __future__ import annotations

import time
from collections.abc import Mapping
from functools import partial
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_warn
from matplotlib.figure import Figure

from crate.data.sampling import sample_order
from crate.metrics import MONITORED, LayerwiseRates, series, trace_model, transformer_blocks
from crate.metrics.functional import Convention
from crate.metrics.layerwise import check_quantities

__all__ = ["CodingRateMonitor", "layer_rate_values", "rate_curves_figure"]


def layer_rate_values(
    model: torch.nn.Module,
    images: torch.Tensor,
    eps: float | None = None,
    convention: Convention = "official",
    quantities: tuple[str, ...] | None = None,
    decoder: bool = False,
) -> dict[str, float]:
    """Per-layer quantities of ``crate.metrics.QUANTITIES`` (all by default) on ``images``, from one trace
    of the model; keys ``rate/<quantity>/layer_<l>``, means over the images. ``decoder=True``: CRATE-MAE's
    decoder layers on the images masked with a fixed seed, keys ``rate_decoder/<quantity>/layer_<l>``."""
    if decoder:
        generator = torch.Generator().manual_seed(0)
        noise = torch.rand(images.shape[0], model.patch_embed.num_patches, generator=generator).to(images.device)
        forward = partial(model.forward_mae, noise=noise)
        traces = trace_model(model, images, attention=False, blocks="decoder_blocks", forward=forward)
    else:
        traces = trace_model(model, images, attention=False)
    # measured by one process on one probe: nothing to sync (a sync here would wait for the other ranks)
    metric = LayerwiseRates(len(traces), eps=eps, convention=convention, quantities=quantities, sync_on_compute=False)
    metric.update(traces)
    prefix = "rate_decoder/" if decoder else "rate/"
    return {f"{prefix}{key}": value.item() for key, value in metric.compute().items()}


def rate_curves_figure(values: dict[str, float], title: str = "") -> Figure:
    """Per-layer curves: R, R^c before and after each attention step, sparsity of each sparse code."""
    sparse = series(values, "sparsity_of_code", "rate/")
    figure = Figure(figsize=(10 if sparse else 7, 3.2), layout="constrained")
    axes = figure.subplots(1, 3 if sparse else 2)
    rates = series(values, "R", "rate/")
    layers = range(len(rates))
    axes[0].plot(layers, rates, marker="o")
    axes[0].set(title="coding rate R(LN Z^l)", xlabel="layer l")
    axes[1].plot(layers, series(values, "Rc_before_attention", "rate/"), marker="o", label="before attention")
    axes[1].plot(layers, series(values, "Rc_after_attention", "rate/"), marker="s", label="after attention")
    axes[1].set(title="compression term R^c(LN Z | U^l)", xlabel="layer l")
    axes[1].legend()
    if sparse:
        axes[2].plot(layers, sparse, marker="o", color="tab:green")
        axes[2].set(title="sparsity of the sparse code", xlabel="layer l", ylim=(0, 1))
    if title:
        figure.suptitle(title)
    return figure


def monitored_model(pl_module: L.LightningModule) -> torch.nn.Module:
    """The network a module trains: its ``model`` attribute, else its one child that has transformer blocks (a
    module of one's own may call it anything)."""
    model = getattr(pl_module, "model", None)
    if isinstance(model, torch.nn.Module):
        return model
    candidates = [child for child in pl_module.children() if _has_blocks(child)]
    if len(candidates) != 1:
        found = "none" if not candidates else f"{len(candidates)}"
        raise AttributeError(
            f"{type(pl_module).__name__} has no `model` attribute and {found} of its submodules have transformer "
            "blocks: keep the network to measure as `self.model`"
        )
    return candidates[0]


def _has_blocks(module: torch.nn.Module) -> bool:
    try:
        transformer_blocks(module)
    except (TypeError, AttributeError):
        return False
    return True


class NoProbe(Exception):
    """There are no validation images to draw the probe batch from (said in the message)."""


def image_of(sample: Any) -> torch.Tensor:
    """The image of one dataset sample: the sample itself, or the first tensor of three dimensions (C, H, W) of an
    ``(image, label)`` pair or of a dict (its ``image`` entry where it has one)."""
    kind = type(sample).__name__
    if isinstance(sample, torch.Tensor):
        return sample
    if isinstance(sample, Mapping):
        sample = [sample["image"]] if "image" in sample else list(sample.values())
    if isinstance(sample, (tuple, list)):
        found = next((value for value in sample if isinstance(value, torch.Tensor) and value.ndim == 3), None)
        if found is not None:
            return found
    raise NoProbe(f"no image tensor (C, H, W) in a validation sample of type {kind}")


class CodingRateMonitor(Callback):
    """Log the per-layer white-box quantities (R, R^c before/after each attention step, sparsity, ...).

    Every ``every_n_steps`` optimizer steps and at each validation epoch end, a fixed probe batch (a seeded
    random sample of ``probe_size`` validation images, so that an image folder's classes are mixed in it)
    runs once through the model in eval mode without gradients,
    traced (``crate.metrics.trace_model``); the values are computed in float64 whatever the training
    precision and logged to every logger as ``rate/<quantity>/layer_{l}`` for each of ``quantities``
    (default ``crate.metrics.MONITORED``; any of ``crate.metrics.QUANTITIES``). ``Rc_before_attention``
    and ``Rc_after_attention`` are measured on what the attention sees (U^T LN(Z)), as the CRATE authors
    measure; ``sparsity_of_code`` only for blocks with a sparse code (CRATE's ISTA output, CRATE-alpha's
    a_2). At validation end a figure of the curves goes to TensorBoard (every ``figure_every_n_epochs``
    epochs and at the last). The
    probe is the same on every process and only rank zero measures, so the values do not depend on
    the number of processes. In a LightningModule of one's own it measures ``self.model`` (else the one submodule
    with transformer blocks) on the image of each validation sample (an ``(image, label)`` pair, a dict's
    ``image``); a run without validation data switches it off with a warning.

    Args:
        enabled: switch the monitor off (it also switches itself off, with a warning, for models
            without transformer blocks).
        every_n_steps: interval in optimizer steps; 0 measures only at validation end.
        probe_size: number of validation images in the probe batch.
        eps: the distortion eps of the coding rate; None (default) takes the convention's: 0.01 for
            ``official``, 0.5 for ``paper``.
        convention: ``official`` (default: unit-norm tokens per head, alpha = p/(N eps), the CRATE
            authors' measurement) or ``paper`` (alpha = d/(N eps^2) on the tokens as they are).
        quantities: the quantities to log (default: R, R^c before/after attention, the sparsities;
            the raw-stream rates and the sparse rate reduction cost more and are in ``crate.interpret``).
        figure_every_n_epochs: send the figure of the curves to TensorBoard at the end of every n-th
            validation epoch and of the last one (0: never). A figure costs about 0.3 s on 2 CPU cores,
            a measurement of the default probe about 0.04 s.
    """

    def __init__(
        self,
        enabled: bool = True,
        every_n_steps: int = 100,
        probe_size: int = 32,
        eps: float | None = None,
        convention: Convention = "official",
        quantities: list[str] | None = None,
        figure_every_n_epochs: int = 10,
    ) -> None:
        if every_n_steps < 0 or probe_size < 1 or figure_every_n_epochs < 0:
            raise ValueError("every_n_steps and figure_every_n_epochs must be >= 0, probe_size >= 1")
        if convention not in ("paper", "official"):
            raise ValueError(f"convention must be 'paper' or 'official', got {convention!r}")
        if eps is not None and eps <= 0:
            raise ValueError(f"eps must be positive, got {eps}")
        self.quantities = check_quantities(MONITORED if quantities is None else quantities)
        self.enabled = enabled
        self.every_n_steps = every_n_steps
        self.probe_size = probe_size
        self.eps = eps
        self.convention = convention
        self.figure_every_n_epochs = figure_every_n_epochs
        self.last_step = -1
        self.seconds = 0.0  # wall time this monitor has spent measuring and logging (its own overhead)
        self._probe: torch.Tensor | None = None

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._check_model(trainer, pl_module)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._check_model(trainer, pl_module)  # train.py validate starts no fit

    def _check_model(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Switch off, with a warning, where the module's network has no blocks to measure or they are sharded."""
        if not self.enabled:
            return
        if "FSDP" in type(trainer.strategy).__name__:
            self._switch_off("under FSDP: the subspaces are sharded across processes")
            return
        try:
            transformer_blocks(monitored_model(pl_module))
        except (TypeError, AttributeError) as err:
            self._switch_off(str(err))

    def _switch_off(self, why: str) -> None:
        rank_zero_warn(f"CodingRateMonitor switched off: {why}")
        self.enabled = False

    def _probe_images(self, trainer: L.Trainer) -> torch.Tensor:
        """The probe batch, drawn once from the validation set (:class:`NoProbe` where there is none)."""
        if self._probe is None:
            # single evaluated images: the DataModule's val_set (its loader may carry encoded files, decode "device")
            dataset = getattr(trainer.datamodule, "val_set", None) if trainer.datamodule is not None else None
            if dataset is None:
                loaders = trainer.val_dataloaders
                loader = loaders[0] if isinstance(loaders, (list, tuple)) and loaders else loaders
                dataset = getattr(loader, "dataset", None)
            if dataset is None:
                raise NoProbe("the run has no validation images to draw its probe batch from")
            order = sample_order(len(dataset), self.probe_size)
            self._probe = torch.stack([image_of(dataset[index]) for index in order])
        return self._probe

    def measure(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, float]:
        # the weights validation measures (the moving average when the module keeps one)
        model = pl_module.evaluated_model() if hasattr(pl_module, "evaluated_model") else monitored_model(pl_module)
        probe = self._probe_images(trainer)
        was_training = model.training
        model.eval()
        try:
            # in the precision the weights train in (a "-true" precision casts them: 64-true, bf16-true)
            images = trainer.precision_plugin.convert_input(probe.to(pl_module.device))
            values = layer_rate_values(model, images, self.eps, self.convention, self.quantities)
            if getattr(model, "decoder_depth", 0) and hasattr(model, "forward_mae"):  # CRATE-MAE's decoder
                values.update(layer_rate_values(model, images, self.eps, self.convention, self.quantities, True))
            return values
        finally:
            model.train(was_training)

    def _log(self, trainer: L.Trainer, pl_module: L.LightningModule, figure: bool) -> None:
        if not trainer.is_global_zero:
            return
        start = time.perf_counter()
        try:
            values = self.measure(trainer, pl_module)
        except NoProbe as err:
            self._switch_off(str(err))
            return
        for logger in trainer.loggers:
            logger.log_metrics(values, step=trainer.global_step)
            if figure and isinstance(logger, TensorBoardLogger):
                title = f"{type(monitored_model(pl_module)).__name__}, step {trainer.global_step}"
                logger.experiment.add_figure("rate/curves", rate_curves_figure(values, title), trainer.global_step)
        self.last_step = trainer.global_step
        self.seconds += time.perf_counter() - start

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        step = trainer.global_step
        if self.enabled and self.every_n_steps and step % self.every_n_steps == 0 and step != self.last_step:
            self._log(trainer, pl_module, figure=False)

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.enabled and not trainer.sanity_checking:
            every, epoch = self.figure_every_n_epochs, trainer.current_epoch
            last = trainer.max_epochs is not None and epoch == trainer.max_epochs - 1
            self._log(trainer, pl_module, figure=every > 0 and ((epoch + 1) % every == 0 or last))

    def state_dict(self) -> dict[str, Any]:
        return {"last_step": self.last_step}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.last_step = int(state_dict.get("last_step", -1))
