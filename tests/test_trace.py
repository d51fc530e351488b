"""The measurement trace: same output as forward, maps equal to what forward computes, and the per-layer
figures against independent transcriptions of how the CRATE authors measure."""

from __future__ import annotations

import csv
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import timm
import torch
from torch import nn

import crate  # noqa: F401  (registers the zoo)
from crate.data.digits import load_digits_tensors
from crate.lit.rate_monitor import layer_rate_values
from crate.metrics import QUANTITIES, LayerwiseRates, layerwise_values, trace_model

FAMILIES = ["crate_nano_patch4_32", "crate_alpha_nano_patch4_32", "vit_nano_patch4_32"]


@pytest.fixture(scope="module")
def digits() -> torch.Tensor:
    return load_digits_tensors(img_size=32, in_chans=1)[1].images[:24]


def _trained(name: str) -> nn.Module:
    return timm.create_model(f"{name}.digits", pretrained=True).eval()


@pytest.mark.parametrize("name", FAMILIES)
def test_traced_forward_equals_forward_and_maps_equal_what_forward_computes(name: str, digits: torch.Tensor) -> None:
    model = _trained(name)
    heads_seen: list[torch.Tensor] = []
    hooks = [
        block.attn.proj.register_forward_pre_hook(lambda m, args: heads_seen.append(args[0].detach()))
        for block in model.blocks
    ]
    with torch.no_grad():
        reference = model.forward_features(digits)  # plain forward (SDPA), hooks record head outputs
    for hook in hooks:
        hook.remove()
    traces = trace_model(model, digits)
    assert len(traces) == len(model.blocks)
    with torch.no_grad():
        torch.testing.assert_close(model.norm(traces[-1].z_out), reference, atol=1e-5, rtol=1e-5)
    for trace, seen in zip(traces, heads_seen, strict=True):
        batch, heads, tokens, width = trace.values.shape
        assert trace.attention.shape == (batch, heads, tokens, tokens)
        torch.testing.assert_close(trace.attention.sum(-1), torch.ones(batch, heads, tokens))
        torch.testing.assert_close(trace.attention, trace.logits.softmax(-1))
        # the recorded maps applied to the recorded values give exactly the forward pass's head outputs
        recombined = (trace.attention @ trace.values).transpose(1, 2).reshape(batch, tokens, heads * width)
        torch.testing.assert_close(recombined, seen, atol=1e-5, rtol=1e-5)
        # the block's pieces fit together: z_half feeds the second step, z_in is the previous output
        torch.testing.assert_close(trace.z_in.shape, trace.z_half.shape)
    for previous, following in zip(traces, traces[1:], strict=False):
        torch.testing.assert_close(previous.z_out, following.z_in)


def test_a_stock_timm_vit_is_traced_with_maps_that_give_its_own_head_outputs(digits: torch.Tensor) -> None:
    """timm's own ViT (its ``Attention``, not the twins'; q and k normed): the trace's maps applied to its values give
    the head outputs its forward computes, and its output is the forward's (the trace raised AttributeError)."""
    model = timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=4, in_chans=1, depth=2, qk_norm=True)
    model.eval()
    seen: list[torch.Tensor] = []
    hooks = [b.attn.proj.register_forward_pre_hook(lambda m, args: seen.append(args[0])) for b in model.blocks]
    with torch.no_grad():
        reference = model.forward_features(digits)
    for hook in hooks:
        hook.remove()
    traces = trace_model(model, digits)
    torch.testing.assert_close(model.norm(traces[-1].z_out), reference, atol=1e-5, rtol=1e-5)
    for trace, heads in zip(traces, seen, strict=True):
        batch, count, tokens, width = trace.values.shape
        recombined = (trace.attention @ trace.values).transpose(1, 2).reshape(batch, tokens, count * width)
        torch.testing.assert_close(recombined, heads, atol=1e-5, rtol=1e-5)


def test_trace_without_attention_leaves_out_the_maps_only(digits: torch.Tensor) -> None:
    model = _trained("crate_nano_patch4_32")
    full, light = trace_model(model, digits), trace_model(model, digits, attention=False)
    for a, b in zip(full, light, strict=True):
        assert b.logits is None and b.attention is None and b.values is None
        torch.testing.assert_close(a.z_out, b.z_out, atol=1e-5, rtol=1e-5)


def test_models_without_traceable_blocks_get_a_clear_error() -> None:
    with pytest.raises(TypeError, match="no `blocks`"):
        trace_model(nn.Linear(3, 3), torch.randn(1, 3))
    model = timm.create_model("crate_nano_patch4_32")
    model.blocks[1] = nn.Identity()
    with pytest.raises(TypeError, match="Identity does not implement forward_trace"):
        trace_model(model, torch.randn(1, 3, 32, 32))


def official_coding_rate(X: np.ndarray, eps: float = 0.01) -> float:
    """Literal transcription of the official ``vis_utils/coding_rate.py`` CodingRate on X (b, h, m, d),
    in float64: tokens normalised over the head dimension, logdet of the m x m matrix, halved sum over
    heads, mean over the batch."""
    X = X / np.linalg.norm(X, axis=-1, keepdims=True)
    W = np.swapaxes(X, -1, -2)  # (b, h, d, m)
    p, m = W.shape[-2], W.shape[-1]
    scalar = p / (m * eps)
    product = np.swapaxes(W, -1, -2) @ W
    logdet = np.linalg.slogdet(np.eye(m) + scalar * product)[1]
    return float((logdet.sum(-1) / 2.0).mean())


@pytest.mark.parametrize("name", FAMILIES[:2])
def test_official_convention_equals_the_official_measurement_code(name: str, digits: torch.Tensor) -> None:
    model = _trained(name)
    heads = model.blocks[0].attn.num_heads
    outputs: list[np.ndarray] = []

    def hook(module: nn.Module, args: tuple, output: torch.Tensor) -> None:  # as crate_hook.py, on `qkv`
        batch, tokens, _ = output.shape
        outputs.append(output.detach().double().numpy().reshape(batch, tokens, heads, -1).transpose(0, 2, 1, 3))

    hooks = [block.attn.qkv.register_forward_hook(hook) for block in model.blocks]
    with torch.no_grad():
        model(digits)
    for handle in hooks:
        handle.remove()
    ours = layer_rate_values(model, digits, convention="official")
    for layer, X in enumerate(outputs):
        expected = official_coding_rate(X)
        assert ours[f"rate/Rc_before_attention/layer_{layer}"] == pytest.approx(expected, rel=1e-6)


def test_crate_alpha_sparsity_is_that_of_its_code_a2(digits: torch.Tensor) -> None:
    model = _trained("crate_alpha_nano_patch4_32")
    inputs: list[np.ndarray] = []
    hooks = [b.norm2.register_forward_hook(lambda m, a, out: inputs.append(out.detach().numpy())) for b in model.blocks]
    with torch.no_grad():
        model(digits)
    for handle in hooks:
        handle.remove()
    ours = layer_rate_values(model, digits)
    for layer, (block, y) in enumerate(zip(model.blocks, inputs, strict=True)):
        D = block.ista.dictionary.detach().numpy()  # (d, 4d), columns are atoms
        eta, lam = block.ista.step_size, block.ista.lambd
        a1 = np.maximum(eta * (D.T @ y[..., None])[..., 0] - eta * lam, 0)  # column form: D^T y
        residual = (D @ a1[..., None])[..., 0] - y  # D a1 - y
        a2 = np.maximum(a1 - eta * (D.T @ residual[..., None])[..., 0] - eta * lam, 0)
        expected = float(np.mean([(sample == 0).mean() for sample in a2]))
        assert ours[f"rate/sparsity_of_code/layer_{layer}"] == pytest.approx(expected, abs=1e-3)
        assert ours[f"rate/sparsity_of_code/layer_{layer}"] > 0.3  # the code is sparse ...
        assert ours[f"rate/sparsity_of_output/layer_{layer}"] == 0.0  # ... the residual output is not


def test_layerwise_metric_over_uneven_batches_equals_the_values_on_the_union(digits: torch.Tensor) -> None:
    model = _trained("crate_nano_patch4_32")
    metric = LayerwiseRates(num_layers=4, convention="paper")
    for chunk in (digits[:5], digits[5:6], digits[6:]):
        metric.update(trace_model(model, chunk, attention=False))
    values = layerwise_values(trace_model(model, digits, attention=False), convention="paper")
    result = metric.compute()
    assert len(result) == len(QUANTITIES) * 4
    for name in QUANTITIES:
        for layer, per_sample in enumerate(values[name]):
            assert result[f"{name}/layer_{layer}"].item() == pytest.approx(per_sample.mean().item(), rel=1e-6)


def test_layerwise_metric_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="num_layers"):
        LayerwiseRates(num_layers=0)
    with pytest.raises(ValueError, match="convention"):
        LayerwiseRates(num_layers=2, convention="mine")
    with pytest.raises(ValueError, match="eps"):
        LayerwiseRates(num_layers=2, eps=-1.0)
    with pytest.raises(ValueError, match="traces of 2 layers"):
        LayerwiseRates(num_layers=2).update([])


def test_rate_monitor_probes_a_class_mixed_sample_of_a_class_sorted_validation_set() -> None:
    """An image folder's validation set lists its classes in turn; the probe is the seeded sample, not the first
    images (which would all be one class)."""
    from types import SimpleNamespace

    from torch.utils.data import DataLoader, TensorDataset

    from crate.data.sampling import sample_order
    from crate.lit.rate_monitor import CodingRateMonitor

    labels = torch.arange(10).repeat_interleave(50)  # 500 images, class by class
    images = torch.arange(500, dtype=torch.float32).view(500, 1, 1, 1).expand(500, 3, 4, 4)  # image i holds i
    dataset = TensorDataset(images, labels)
    from_datamodule = SimpleNamespace(datamodule=SimpleNamespace(val_set=dataset))
    from_loader = SimpleNamespace(datamodule=None, val_dataloaders=DataLoader(dataset, batch_size=64))
    for trainer in (from_datamodule, from_loader):
        probe = CodingRateMonitor(probe_size=32)._probe_images(trainer)
        drawn = probe[:, 0, 0, 0].long().tolist()
        assert drawn == sample_order(500, 32) and len(set(drawn)) == 32
        assert len(set(labels[drawn].tolist())) >= 5  # first 32 images: class 0 only


class _OwnModule(L.LightningModule):
    """A LightningModule of a user's own: its network under another name than ``model``, dict samples whose
    image is neither first nor named ``image``."""

    def __init__(self) -> None:
        super().__init__()
        self.net = timm.create_model("crate_nano_patch4_32", num_classes=3, img_size=16)

    def training_step(self, batch: dict[str, torch.Tensor], _: int) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self.net(batch["pixels"]), batch["label"])

    def validation_step(self, batch: dict[str, torch.Tensor], _: int) -> None:
        self.log("val_loss", torch.nn.functional.cross_entropy(self.net(batch["pixels"]), batch["label"]))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class _Dicts(torch.utils.data.Dataset):
    def __init__(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"label": self.labels[index], "pixels": self.images[index]}  # the label first, no "image" key


def test_rate_monitor_in_a_module_of_one_s_own(tmp_path: Path) -> None:
    """The monitor measures a network the module keeps under another name than ``model``, on a dataset of dict
    samples (the values logged at the end are those of the final network on the seeded probe of the samples'
    images); a run without validation data trains to its end, the monitor switched off with a warning."""
    from lightning.pytorch.loggers import CSVLogger
    from torch.utils.data import DataLoader

    from crate.data.sampling import sample_order
    from crate.lit.rate_monitor import CodingRateMonitor

    torch.manual_seed(0)
    images, labels = torch.randn(16, 3, 16, 16), torch.randint(0, 3, (16,))
    loader = DataLoader(_Dicts(images, labels), batch_size=4)
    settings = dict(max_epochs=1, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    module = _OwnModule()
    logger = CSVLogger(tmp_path, name="own")
    trainer = L.Trainer(callbacks=[CodingRateMonitor(every_n_steps=2, probe_size=4)], logger=logger, **settings)
    trainer.fit(module, loader, loader)
    with open(Path(logger.log_dir) / "metrics.csv") as file:
        rows = [row for row in csv.DictReader(file) if row.get("rate/R/layer_0")]
    assert len(rows) >= 2  # every 2 steps and at the validation's end
    expected = layer_rate_values(module.net.eval(), images[sample_order(16, 4)], quantities=("R",))
    assert float(rows[-1]["rate/R/layer_0"]) == pytest.approx(expected["rate/R/layer_0"], rel=1e-5)
    unvalidated = _OwnModule()
    with pytest.warns(UserWarning, match="switched off: the run has no validation images"):
        L.Trainer(callbacks=[CodingRateMonitor(every_n_steps=2)], logger=False, **settings).fit(unvalidated, loader)
    assert unvalidated.trainer.global_step == 4  # trained to its end
    # a network without transformer blocks is validated alone (train.py validate) with the monitor switched off
    convolutional = _OwnModule()
    convolutional.net = timm.create_model("resnet10t", num_classes=3)
    with pytest.warns(UserWarning, match="switched off: _OwnModule has no `model` attribute and none of its subm"):
        L.Trainer(callbacks=[CodingRateMonitor()], logger=False, **settings).validate(convolutional, loader)


@pytest.mark.parametrize("precision", ["64-true", "bf16-true"])
def test_rate_monitor_probes_weights_trained_in_a_true_precision(tmp_path: Path, precision: str) -> None:
    """Under a "-true" precision Lightning casts the weights (float64, bfloat16); the probe batch was fed as float32
    and the first validation ended the fit with LayerNorm's "mixed dtype" RuntimeError. It is cast as Lightning
    casts the batches: the values logged at the end are those of the final weights on the probe in their dtype."""
    from lightning.pytorch.loggers import CSVLogger
    from torch.utils.data import DataLoader

    from crate.data.sampling import sample_order
    from crate.lit.rate_monitor import CodingRateMonitor

    torch.manual_seed(0)
    images, labels = torch.randn(16, 3, 16, 16), torch.randint(0, 3, (16,))
    loader = DataLoader(_Dicts(images, labels), batch_size=4)
    module, logger = _OwnModule(), CSVLogger(tmp_path, name="own")
    trainer = L.Trainer(
        callbacks=[CodingRateMonitor(every_n_steps=2, probe_size=4)],
        logger=logger,
        precision=precision,
        max_epochs=1,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, loader, loader)
    with open(Path(logger.log_dir) / "metrics.csv") as file:
        rows = [row for row in csv.DictReader(file) if row.get("rate/R/layer_0")]
    dtype = {"64-true": torch.float64, "bf16-true": torch.bfloat16}[precision]
    assert len(rows) >= 2 and next(module.net.parameters()).dtype == dtype
    probe = images[sample_order(16, 4)].to(dtype)
    expected = layer_rate_values(module.net.eval(), probe, quantities=("R",))
    assert float(rows[-1]["rate/R/layer_0"]) == pytest.approx(expected["rate/R/layer_0"], rel=1e-5)
