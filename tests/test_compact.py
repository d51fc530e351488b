"""CCT's convolutional tokenizer and sequence pooling, the CRATE twins built on them and CCT's own models as
their ViT twins: parameter counts from a transcription of CCT's layer shapes, outputs against independent
computations, and the white-box trace reading them as any other member."""

from __future__ import annotations

import pytest
import timm
import torch
import torch.nn.functional as F

import crate  # noqa: F401
from crate.layers import ConvTokenizer, SeqPool
from crate.metrics import trace_model

# CCT's published sizes (Hassani et al. 2021, CIFAR-10 table): name -> (layers, conv blocks, width, heads,
# MLP ratio, parameters in millions as printed)
CCT = {
    "cct2_3x2": (2, 2, 128, 2, 1, 0.28),
    "cct4_3x2": (4, 2, 128, 2, 1, 0.48),
    "cct7_3x1": (7, 1, 256, 4, 2, 3.76),
}


def cct_parameters(layers: int, conv_blocks: int, width: int, mlp_ratio: int, classes: int = 10) -> int:
    """CCT's parameter count, layer by layer from its description: a tokenizer of 3x3 convolutions without
    bias (3 -> 64 -> ... -> width), a learned position embedding over the (32 / 2^blocks)^2 tokens, each layer
    a pre-norm (LayerNorm), a qkv projection without bias, an output projection with bias, a second LayerNorm
    and an MLP width -> f -> width with biases, then the final LayerNorm, the sequence-pooling score
    Linear(width, 1) and the classifier."""
    widths = [3] + [64] * (conv_blocks - 1) + [width]
    tokenizer = sum(9 * a * b for a, b in zip(widths[:-1], widths[1:], strict=True))
    tokens = (32 // 2**conv_blocks) ** 2
    f = width * mlp_ratio
    layer = 2 * width + 3 * width * width + (width * width + width) + 2 * width + (width * f + f) + (f * width + width)
    return tokenizer + tokens * width + layers * layer + 2 * width + (width + 1) + (width * classes + classes)


@pytest.mark.parametrize("shape", sorted(CCT))
def test_the_vit_twins_are_ccts_models_and_the_crate_twins_match_them(shape: str) -> None:
    layers, blocks, width, heads, ratio, published = CCT[shape]
    vit = timm.create_model(f"vit_{shape}_32", num_classes=10)
    count = sum(p.numel() for p in vit.parameters())
    assert count == cct_parameters(layers, blocks, width, ratio) and round(count / 1e6, 2) == published
    crate_twin = timm.create_model(f"crate_{shape}_32", num_classes=10)
    assert abs(sum(p.numel() for p in crate_twin.parameters()) / count - 1) < 0.05
    tokens = (32 // 2**blocks) ** 2
    for model in (vit, crate_twin):
        assert model.num_prefix_tokens == 0 and model.pos_embed.shape == (1, tokens, width)
        assert model.blocks[0].attn.num_heads == heads


def test_the_width_152_pair_is_cct4_widened_and_spends_most_of_a_0_7_m_budget() -> None:
    """Not a published CCT: CCT-4/3x2's layer shapes at width 152 (2 heads of 76), counted by the same
    transcription, and the CRATE twin's 8 layers within 5% of it, both under 0.7 M."""
    layers, blocks, _, heads, ratio, _ = CCT["cct4_3x2"]
    vit = timm.create_model("vit_cct4_3x2_w152_32", num_classes=10)
    crate_twin = timm.create_model("crate_cct4_3x2_w152_32", num_classes=10)
    count = sum(p.numel() for p in vit.parameters())
    assert count == cct_parameters(layers, blocks, 152, ratio)
    crate_count = sum(p.numel() for p in crate_twin.parameters())
    assert abs(crate_count / count - 1) < 0.05 and max(count, crate_count) <= 700_000
    narrow = timm.create_model("crate_cct4_3x2_32", num_classes=10)
    assert len(crate_twin.blocks) == len(narrow.blocks) == 8 and crate_count > 1.3 * sum(
        p.numel() for p in narrow.parameters()
    )
    for model in (vit, crate_twin):
        assert model.pos_embed.shape == (1, 64, 152) and model.blocks[0].attn.num_heads == heads


@pytest.mark.parametrize("name", ["crate_alpha_cct4_3x2_32", "cbt_cct4_3x2_32"])
def test_crate_alpha_and_cbt_take_the_tokenizer_and_pooling_at_cct4s_count(name: str) -> None:
    """Their layers as they are (CRATE-alpha's 3x dictionary, CBT's CBSA pooling the 8 x 8 patch grid onto 4 x 4
    representatives), the tokenizer's tokens as layer 0's input, and CCT-4/3x2's count within 5%."""
    torch.manual_seed(0)
    model = timm.create_model(name, num_classes=10).eval()
    layers, blocks, width, _, ratio, _ = CCT["cct4_3x2"]
    count = sum(p.numel() for p in model.parameters())
    assert abs(count / cct_parameters(layers, blocks, width, ratio) - 1) < 0.05
    assert isinstance(model.patch_embed, ConvTokenizer) and isinstance(model.seq_pool, SeqPool)
    assert model.num_prefix_tokens == 0 and model.pos_embed.shape == (1, 64, width)
    images = torch.randn(2, 3, 32, 32)
    traces = trace_model(model, images)
    with torch.no_grad():
        tokens = model.patch_embed(images) + model.pos_embed
    torch.testing.assert_close(traces[0].z_in, tokens)
    attn = model.blocks[0].attn
    if name.startswith("crate_alpha"):
        assert len(model.blocks) == 3 and model.blocks[0].ista.dictionary.shape == (width, 3 * width)
    else:  # the representatives: the mean of each 2 x 2 cell of the token grid, no token skipped as a prefix
        expected = tokens.reshape(2, 4, 2, 4, 2, width).mean(dim=(2, 4)).reshape(2, 16, width)
        torch.testing.assert_close(attn.representatives(tokens), expected)


def test_the_tokenizer_is_conv_relu_maxpool_blocks() -> None:
    torch.manual_seed(0)
    tokenizer = ConvTokenizer(img_size=32, in_chans=3, embed_dim=16, conv_layers=2, hidden_chans=8)
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    convs = [m.weight.double() for m in tokenizer.proj if isinstance(m, torch.nn.Conv2d)]
    expected = x
    for weight in convs:
        expected = F.max_pool2d(F.relu(F.conv2d(expected, weight, padding=1)), 3, stride=2, padding=1)
    expected = expected.reshape(2, 16, 64).transpose(1, 2)  # row-major tokens
    torch.testing.assert_close(tokenizer.double()(x), expected)
    assert tokenizer.grid_size == (8, 8) and tokenizer.patch_size == (4, 4)
    with pytest.raises(ValueError, match="reduces the image 4x"):
        ConvTokenizer(img_size=32, patch_size=8, conv_layers=2)
    # an image size the reduction does not divide is refused in the tokenizer's words (it was refused as "not
    # divisible by patch_size=(4, 4)", a patch size the member does not have), at build and at set_input_size
    said = r"img_size=\(30, 30\) is not divisible by the tokenizer's reduction 4 .*: give sides that are multiples of 4"
    with pytest.raises(ValueError, match=said):
        timm.create_model("crate_cct4_3x2_32", img_size=30)
    with pytest.raises(ValueError, match=said):
        tokenizer.set_input_size(img_size=30)


def test_sequence_pooling_is_a_softmax_weighted_mean_of_the_tokens() -> None:
    torch.manual_seed(0)
    pool = SeqPool(6).double()
    x = torch.randn(3, 5, 6, dtype=torch.float64)
    w, b = pool.attention_pool.weight[0], pool.attention_pool.bias[0]
    scores = torch.exp(x @ w + b)
    expected = torch.einsum("bn,bnd->bd", scores / scores.sum(1, keepdim=True), x)
    torch.testing.assert_close(pool(x), expected)


def test_the_trace_reads_the_tokenizers_tokens_as_layer_0s_input() -> None:
    torch.manual_seed(0)
    model = timm.create_model("crate_cct2_3x2_32", num_classes=10).eval()
    images = torch.randn(2, 3, 32, 32)
    traces = trace_model(model, images)
    assert len(traces) == 4
    with torch.no_grad():
        tokens = model.patch_embed(images) + model.pos_embed
    torch.testing.assert_close(traces[0].z_in, tokens)


def test_a_class_token_pool_without_a_class_token_is_refused() -> None:
    with pytest.raises(ValueError, match="reads the class token, and this model has none: pool 'avg' or 'seq'"):
        timm.create_model("crate_cct2_3x2_32", global_pool="token")
