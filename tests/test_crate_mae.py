"""CRATE-MAE: sizes, decoder layer, masking, position table, the released layout, and learning on digits."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from reference_crate_mae import ReleasedCrateMAE, mae_sincos_table
from test_layers import mssa_literal

import crate  # noqa: F401
from benchmarks.official_layouts import perturb_
from crate.models import CheckpointError, CrateMAE, CrateMAEDecoderBlock
from crate.models.crate_mae import sincos_pos_embed


@pytest.mark.parametrize(
    "name,decoder_depth,params",
    [
        ("crate_mae_tiny_patch16_224", 12, 11_555_328),
        ("crate_mae_small_patch16_224", 12, 25_405_824),
        ("crate_mae_base_patch16_224", 12, 44_638_464),
        ("crate_mae_large_patch16_224", 24, 154_274_560),
    ],
)
def test_parameter_counts_equal_the_released_code(name: str, decoder_depth: int, params: int) -> None:
    with torch.device("meta"):
        model = timm.create_model(name, num_classes=0, decoder_depth=decoder_depth)
        assert timm.create_model(name).pretraining_decoder_depth == decoder_depth
    # the released count also holds the two fixed tables (buffers here) and the unused decoder_embed
    tables = model.pos_embed.numel() + model.decoder_pos_embed.numel()
    decoder_embed = model.embed_dim**2 + model.embed_dim
    assert sum(p.numel() for p in model.parameters()) + tables + decoder_embed == params


def test_decoder_layer_matches_its_literal_transcription() -> None:
    torch.manual_seed(0)
    dim, heads = 48, 4
    block = CrateMAEDecoderBlock(dim, heads).eval()
    for norm in (block.norm1, block.norm2):
        norm.weight.data.uniform_(0.5, 1.5)
        norm.bias.data.normal_(0, 0.1)
    x = torch.randn(2, 9, dim)

    def layer_norm(z: torch.Tensor, norm: torch.nn.LayerNorm) -> torch.Tensor:  # column form: tokens as columns
        mu, var = z.mean(0), z.var(0, unbiased=False)
        return (z - mu) / torch.sqrt(var + norm.eps) * norm.weight[:, None] + norm.bias[:, None]

    p = dim // heads
    U = [block.attn.qkv.weight[k * p : (k + 1) * p].T for k in range(heads)]
    for sample in range(2):
        Z = x[sample].T  # d x N
        lifted = block.dictionary.weight @ layer_norm(Z, block.norm1)  # x' = A LN(x)
        expected = lifted - mssa_literal(
            layer_norm(lifted, block.norm2), U, block.attn.proj.weight, block.attn.proj.bias
        )
        with torch.no_grad():
            torch.testing.assert_close(block(x)[sample].T, expected, atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        out, trace = block.forward_trace(x)
    torch.testing.assert_close(out, block(x).detach())
    assert trace.attention.shape == (2, heads, 9, 9) and trace.sparse_code is None


@pytest.mark.parametrize("ratio", [0.0, 0.5, 0.75, 0.9])
def test_masking_keeps_exactly_the_requested_fraction(ratio: float) -> None:
    torch.manual_seed(0)
    x = torch.randn(5, 64, 8)
    kept, mask, restore = CrateMAE.random_masking(x, ratio)
    keep = int(64 * (1 - ratio))
    assert kept.shape == (5, keep, 8)
    assert torch.equal(mask.sum(1), torch.full((5,), 64.0 - keep))
    for sample in range(5):  # the kept tokens are exactly the unmasked ones
        unmasked = x[sample, mask[sample] == 0]
        assert sorted(map(tuple, kept[sample].tolist())) == sorted(map(tuple, unmasked.tolist()))
    if 0 < keep < 64:
        assert not all(torch.equal(mask[0], mask[i]) for i in range(1, 5))  # a new mask per image


def test_fixed_position_table_is_maes() -> None:
    for dim, grid in ((96, 8), (384, 14)):
        expected = mae_sincos_table(dim, grid)
        np.testing.assert_allclose(sincos_pos_embed(dim, (grid, grid))[0].double().numpy(), expected, atol=1e-6)
    model = timm.create_model("crate_mae_nano_patch4_32", decoder_depth=4)
    parameters = dict(model.named_parameters())
    assert "pos_embed" not in parameters and "decoder_pos_embed" not in parameters  # fixed: buffers
    assert {"pos_embed", "decoder_pos_embed"} <= set(model.state_dict())  # saved under the released names


def _released(seed: int = 0) -> ReleasedCrateMAE:
    torch.manual_seed(seed)
    released = ReleasedCrateMAE(img=32, patch=4, chans=3, dim=96, depth=4, heads=4, decoder_depth=4)
    fixed = {"pos_embed", "decoder_pos_embed"}
    kept = {name: p.detach().clone() for name, p in released.named_parameters() if name in fixed}
    perturb_(released, scale=0.05)
    with torch.no_grad():
        for name, value in kept.items():  # the sin-cos tables are fixed, as in the released code
            released.get_parameter(name).copy_(value)
    return released.eval()


@pytest.mark.parametrize("wrap", ["plain", "model"])
def test_released_checkpoint_gives_identical_outputs(tmp_path: Path, wrap: str) -> None:
    released = _released()
    state = released.state_dict()
    torch.save({"model": state} if wrap == "model" else state, tmp_path / "crate_mae.pth")
    file = dict(file=str(tmp_path / "crate_mae.pth"))
    # the released layout does not record ISTA's lambda: it must be given (the reference trains with 0.5)
    with pytest.raises(CheckpointError, match="does not record the ISTA lambda"):
        timm.create_model("crate_mae_nano_patch4_32", pretrained=True, pretrained_cfg_overlay=file, num_classes=0)
    ours = timm.create_model(
        "crate_mae_nano_patch4_32",
        pretrained=True,
        pretrained_cfg_overlay=file,
        num_classes=0,
        decoder_depth=4,
        lambd=0.5,
    )
    ours.eval()
    images = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        torch.manual_seed(7)
        expected = released(images, 0.75)
        torch.manual_seed(7)
        got = ours.forward_mae(images, 0.75)
    torch.testing.assert_close(got[2], expected[2])  # the same mask
    torch.testing.assert_close(got[1], expected[1], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[0], expected[0], atol=1e-5, rtol=1e-5)
    # the encoder alone (the registered model, decoder_depth=0) takes the same file and encodes as the full
    # model does
    encoder = timm.create_model(
        "crate_mae_nano_patch4_32",
        pretrained=True,
        pretrained_cfg_overlay=dict(file, num_classes=0),
        num_classes=10,
        lambd=0.5,
    ).eval()
    assert not any(name.startswith("decoder") for name, _ in encoder.named_parameters())
    overlay = dict(file, num_classes=0)
    guessed = timm.create_model("crate_mae_nano_patch4_32", pretrained=True, pretrained_cfg_overlay=overlay, lambd=5.0)
    with torch.no_grad():
        torch.testing.assert_close(encoder.forward_features(images), ours.forward_features(images))
        # the same weights with another lambda encode differently: why a guessed lambda is refused
        assert (guessed.eval().forward_features(images) - ours.forward_features(images)).abs().max() > 1e-2


def test_encoder_without_decoder_refuses_masked_pretraining() -> None:
    encoder = timm.create_model("crate_mae_nano_patch4_32")
    with pytest.raises(RuntimeError, match="built without a decoder.*decoder_depth=4"):
        encoder.forward_mae(torch.randn(1, 3, 32, 32))
    with pytest.raises(ValueError, match="mask_ratio"):
        timm.create_model("crate_mae_nano_patch4_32", mask_ratio=1.0)


def test_patchify_round_trip_and_reconstruction_of_a_perfect_prediction() -> None:
    model = timm.create_model("crate_mae_nano_patch4_32", in_chans=1, decoder_depth=4)
    images = torch.randn(2, 1, 32, 32)
    patches = model.patchify(images)
    assert patches.shape == (2, 64, 16)
    torch.testing.assert_close(patches[0, 9], images[0, 0, 4:8, 4:8].reshape(-1))  # row 1, column 1
    torch.testing.assert_close(model.unpatchify(patches), images)
    target = (patches - patches.mean(-1, keepdim=True)) / (patches.var(-1, keepdim=True) + 1e-6).sqrt()
    torch.testing.assert_close(model.reconstruct(images, target), images, atol=1e-4, rtol=1e-4)
    mask = torch.zeros(2, 64)
    mask[:, :10] = 1
    assert model.reconstruction_loss(images, target, mask) < 1e-10


def test_pretraining_loss_falls_on_digits() -> None:
    from crate.data.digits import load_digits_tensors

    train = load_digits_tensors(img_size=32, in_chans=1)[0].images[:256]
    torch.manual_seed(0)
    model = timm.create_model("crate_mae_nano_patch4_32", in_chans=1, num_classes=0, decoder_depth=4)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    noise = torch.rand(256, 64, generator=torch.Generator().manual_seed(1))  # one fixed mask to compare on

    def held_out_loss() -> float:
        with torch.no_grad():
            return float(model.eval().forward_mae(train, noise=noise)[0])

    before = held_out_loss()
    model.train()
    for step in range(60):
        batch = train[(step * 64) % 256 :][:64]
        loss = model.forward_mae(batch)[0]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    after = held_out_loss()
    assert math.isfinite(after) and after < 0.8 * before


def test_masked_pretraining_recomputes_every_block_under_gradient_checkpointing() -> None:
    # a checkpointed block starts its forward twice in a training step (once more in the backward, which may
    # stop the recomputation early: so pre-hooks count, not forward hooks); count the calls of every encoder
    # and decoder block in one forward_mae + backward, with checkpointing off and on
    torch.manual_seed(0)
    model = timm.create_model("crate_mae_nano_patch4_32", decoder_depth=4).train()
    images = torch.randn(2, 3, 32, 32)
    blocks = list(model.blocks) + list(model.decoder_blocks)
    calls = {False: [0] * len(blocks), True: [0] * len(blocks)}

    def counter(enabled: bool, index: int):
        return lambda *_: calls[enabled].__setitem__(index, calls[enabled][index] + 1)

    for enabled in (False, True):
        model.set_grad_checkpointing(enabled)
        hooks = [block.register_forward_pre_hook(counter(enabled, i)) for i, block in enumerate(blocks)]
        model.forward_mae(images, noise=torch.rand(2, model.patch_embed.num_patches))[0].backward()
        for hook in hooks:
            hook.remove()
    assert calls == {False: [1] * len(blocks), True: [2] * len(blocks)}
