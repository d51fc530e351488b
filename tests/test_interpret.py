"""Interpretability evaluation: statistics against numpy, properties of CRATE, and the full report."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from conftest import write_image_folder
from PIL import Image

import crate  # noqa: F401
from crate.data.sampling import sample_order
from crate.interpret import load_data
from crate.interpret.__main__ import main
from crate.interpret.evaluate import attention_lenses, operator_geometry, seed_lenses
from crate.interpret.geometry import (
    dictionary_coherence,
    gram_identity_distance,
    random_subspace_coherence_draws,
    subspace_coherence,
)
from crate.interpret.lenses import head_redundancy, relative_dispersion, token_dispersion
from crate.interpret.segmentation import attention_masks, foreground_patches, mask_iou, random_mask_iou
from crate.lit.rate_monitor import layer_rate_values
from crate.metrics import QUANTITIES, trace_model

REPO = Path(__file__).resolve().parents[1]


def test_subspace_coherence_equals_numpy() -> None:
    rng = np.random.default_rng(0)
    U = rng.standard_normal((3, 10, 4))
    U[2, :, 0] = U[0, :, 1]  # heads 0 and 2 share a direction: coherence 1
    ours = subspace_coherence(torch.from_numpy(U)).numpy()
    for i in range(3):
        for j in range(3):
            Qi, Qj = np.linalg.qr(U[i])[0], np.linalg.qr(U[j])[0]
            assert ours[i, j] == pytest.approx(np.linalg.svd(Qi.T @ Qj, compute_uv=False).max(), abs=1e-10)
    assert ours[0, 2] == pytest.approx(1.0, abs=1e-10)


def test_dictionary_statistics_equal_numpy() -> None:
    D = np.random.default_rng(1).standard_normal((8, 12))
    atoms = D / np.linalg.norm(D, axis=0)
    gram = np.abs(atoms.T @ atoms) - np.eye(12)
    assert dictionary_coherence(torch.from_numpy(D)) == pytest.approx(gram.max(), abs=1e-12)
    expected = np.linalg.norm(D.T @ D - np.eye(12)) / np.sqrt(12)
    assert gram_identity_distance(torch.from_numpy(D)) == pytest.approx(expected, rel=1e-12)


def _hand_set_vit(kind: str) -> torch.nn.Module:
    """The ViT twin with the first layer's key projection set from its query projection:
    ``symmetric`` W_k = W_q (scores q q^T: symmetric PSD), ``negative`` W_k = -W_q (negative
    semidefinite), ``uniform`` W_q = 0 (every score 0: uniform attention); biases of q and k zero."""
    torch.manual_seed(0)
    model = timm.create_model("vit_nano_patch4_32").eval()
    attn = model.blocks[0].attn
    width = attn.num_heads * attn.head_dim
    with torch.no_grad():
        weight, bias = attn.qkv.weight, attn.qkv.bias
        bias[: 2 * width] = 0
        if kind == "uniform":
            weight[:width] = 0
        else:
            weight[width : 2 * width] = weight[:width] * (1 if kind == "symmetric" else -1)
    return model


def _numpy_scores(model: torch.nn.Module, attn_input: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Scores S (B, K, N, N) and values V (B, K, N, p) of layer 0 from its weights, in float64 numpy."""
    attn = model.blocks[0].attn
    x = attn_input.double().numpy()
    weight, bias = attn.qkv.weight.detach().double().numpy(), attn.qkv.bias.detach().double().numpy()
    qkv = x @ weight.T + bias
    heads, width = attn.num_heads, attn.head_dim
    q, k, v = (qkv[..., i * heads * width : (i + 1) * heads * width] for i in range(3))
    split = lambda t: t.reshape(*t.shape[:2], heads, width).transpose(0, 2, 1, 3)  # noqa: E731
    q, k, v = split(q), split(k), split(v)
    return q @ k.transpose(0, 1, 3, 2) / np.sqrt(width), v


def _np_softmax(S: np.ndarray) -> np.ndarray:
    e = np.exp(S - S.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _np_lenses(s: np.ndarray, a: np.ndarray, rank: int) -> dict[str, float]:
    """Every attention lens of one head, written out with numpy from its definition."""
    n = s.shape[0]
    J = np.eye(n) - np.ones((n, n)) / n
    C = J @ s @ J
    eigenvalues, vectors = np.linalg.eigh((C + C.T) / 2)
    singular = np.linalg.svd(a, compute_uv=False)
    share = singular / singular.sum()
    share = share[share > 0]
    top = vectors[:, np.argsort(eigenvalues)[-rank:]]
    return {
        "asymmetry": np.linalg.norm(C - C.T) / np.linalg.norm(C),
        "negative_mass": np.abs(eigenvalues[eigenvalues < 0]).sum() / np.abs(eigenvalues).sum(),
        "effective_rank": float(np.exp(-(share * np.log(share)).sum())),
        "kernel_agreement": np.linalg.norm(a @ J @ top) ** 2 / np.linalg.norm(a @ J) ** 2,
        "entropy": float(np.mean(-(a * np.log(a)).sum(-1))),
        "top_k_mass": float(np.mean(np.sort(a, axis=-1)[:, -5:].sum(-1))),
    }


@pytest.mark.parametrize("kind", ["symmetric", "negative", "uniform"])
def test_attention_lenses_equal_numpy_on_hand_set_weights(kind: str) -> None:
    model = _hand_set_vit(kind)
    x = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    trace = trace_model(model, x)[0]
    S, V = _numpy_scores(model, trace.attn_input)
    np.testing.assert_allclose(trace.logits.double().numpy(), S, atol=1e-4)  # the trace holds the model's scores
    A = _np_softmax(S)
    ours = attention_lenses(trace, top_k=5)
    batch, heads, tokens, width = V.shape
    for h in range(heads):
        expected = [_np_lenses(S[b, h], A[b, h], width) for b in range(batch)]
        keys = ["effective_rank", "entropy", "top_k_mass"]
        # uniform: S = 0 has no kernel to measure (0/0); negative: the top eigenvalue 0 is (N - p - 1)-fold,
        # so "the top p eigenvectors" are not unique
        keys += ["asymmetry", "negative_mass"] if kind != "uniform" else []
        keys += ["kernel_agreement"] if kind == "symmetric" else []
        for key in keys:
            reference = np.mean([e[key] for e in expected])
            assert ours[key][h] == pytest.approx(reference, rel=1e-3, abs=1e-6), (kind, key, h)
    # the answers known in advance for these weights
    if kind in ("symmetric", "negative"):  # up to float32 rounding of the model's own scores
        assert max(ours["asymmetry"]) < 1e-6
        assert max(ours["negative_mass"]) < 1e-6 if kind == "symmetric" else min(ours["negative_mass"]) > 1 - 1e-6
    else:
        assert ours["effective_rank"] == pytest.approx([1.0] * heads, abs=1e-6)
        assert ours["entropy"] == pytest.approx([math.log(tokens)] * heads, rel=1e-9)
        assert ours["top_k_mass"] == pytest.approx([5 / tokens] * heads, rel=1e-9)
        assert ours["redundancy"] == pytest.approx(1.0, abs=1e-9)
        # uniform attention: a random key subset gives the subset's mean of the values
        seeds = seed_lenses(trace, keys=(8,))
        generator = torch.Generator().manual_seed(0)
        errors = []
        for _ in range(4):
            subset = torch.randperm(tokens, generator=generator)[:8].numpy()
            full, sub = V.mean(2), V[:, :, subset].mean(2)
            errors.append(np.mean(np.linalg.norm(sub - full, axis=-1) / np.linalg.norm(full, axis=-1)))
        assert seeds["subsampling_error"][0] == pytest.approx(np.mean(errors), rel=1e-6)


def test_redundancy_and_dispersion_equal_numpy() -> None:
    rng = np.random.default_rng(2)
    A = _np_softmax(rng.standard_normal((2, 3, 6, 6)))
    Z = rng.standard_normal((2, 7, 5))
    red = head_redundancy(torch.from_numpy(A)).numpy()
    for b in range(2):
        flat = A[b].reshape(3, -1)
        cosines = [
            flat[h] @ flat[g] / np.linalg.norm(flat[h]) / np.linalg.norm(flat[g])
            for h in range(3)
            for g in range(3)
            if h != g
        ]
        assert red[b] == pytest.approx(np.mean(cosines), rel=1e-12)
        spread = np.mean(np.sum((Z[b] - Z[b].mean(0)) ** 2, axis=-1))
        assert token_dispersion(torch.from_numpy(Z))[b].item() == pytest.approx(spread, rel=1e-12)
        relative = spread / np.mean(np.sum(Z[b] ** 2, axis=-1))
        assert relative_dispersion(torch.from_numpy(Z))[b].item() == pytest.approx(relative, rel=1e-12)
    same = torch.ones(1, 5, 4)
    assert token_dispersion(same).item() == 0.0


def test_crate_head_geometry_on_hand_set_subspaces() -> None:
    model = timm.create_model("crate_nano_patch4_32").eval()  # d = 96, 4 heads of width 24
    with torch.no_grad():
        model.blocks[0].attn.qkv.weight.copy_(torch.eye(96))  # head k reads coordinates 24k .. 24k+23
    traces = trace_model(model, torch.randn(1, 3, 32, 32), attention=False)
    geometry = operator_geometry(model, traces)
    assert geometry["mean_head_coherence"][0] == pytest.approx(0.0, abs=1e-12)  # orthogonal heads
    # the random baseline: for lines (p = 1) in R^10 the mean |cos| is Gamma(5) / (sqrt(pi) Gamma(5.5))
    expected = math.gamma(5) / (math.sqrt(math.pi) * math.gamma(5.5))
    # and their spread: E[cos^2] = 1/10, so the sd of |cos| is sqrt(1/10 - expected^2)
    lines = random_subspace_coherence_draws(2, 10, 1, draws=3000)
    assert np.mean(lines) == pytest.approx(expected, abs=0.01)
    assert np.std(lines, ddof=1) == pytest.approx(math.sqrt(0.1 - expected**2), abs=0.01)
    assert random_subspace_coherence_draws(3, 8, 8, draws=2) == pytest.approx([1.0, 1.0], abs=1e-9)  # p = d
    # the report carries the mean and the spread of its own shape's draws (4 heads of 24 in 96)
    reference = random_subspace_coherence_draws(4, 96, 24)
    assert geometry["random_head_coherence"] == pytest.approx(np.mean(reference))
    assert geometry["random_head_coherence_sd"] == pytest.approx(np.std(reference, ddof=1))


def test_segmentation_pieces_on_known_masks() -> None:
    attention = torch.tensor([[[0.5, 0.3, 0.1, 0.1]]])
    kept = attention_masks(attention, mass=0.6)
    assert kept.tolist() == [[[True, True, False, False]]]  # 0.5 < 0.6, 0.5 + 0.3 reaches it
    target = torch.tensor([[True, False, True, False]])
    assert mask_iou(kept, target).item() == pytest.approx(1 / 3)
    # random 2 of 4 against a fixed 2 of 4: IoU 1 (1 way), 1/3 (4 ways), 0 (1 way)
    assert random_mask_iou(kept, target, draws=4000).item() == pytest.approx((1 + 4 / 3) / 6, abs=0.02)
    pixels = torch.zeros(1, 4, 4, dtype=torch.bool)
    pixels[0, :2, :2] = True  # top-left patch full
    pixels[0, 2, 2:] = True  # bottom-right patch half full
    pixels[0, 0, 2] = True  # top-right patch a quarter full
    assert foreground_patches(pixels, (2, 2)).tolist() == [[True, False, False, True]]


def _folder_config(tmp_path: Path) -> Path:
    """A train.py config whose data is the PIL image folder ``tmp_path/images`` at 32 pixels."""
    config = tmp_path / "data.yaml"
    data_args = f"root: {tmp_path / 'images'}\n    img_size: 32\n    num_workers: 0"
    config.write_text(f"data:\n  class_path: crate.lit.ImageFolderDataModule\n  init_args:\n    {data_args}\n")
    return config


def test_masks_from_a_folder_follow_the_evaluation_transform(tmp_path: Path) -> None:
    write_image_folder(tmp_path / "images", classes=2, per_class=2)
    for path in (tmp_path / "images" / "val").rglob("*.png"):
        mask = np.zeros((20, 24), dtype=np.uint8)
        mask[:, :12] = 255  # left half foreground
        target = tmp_path / "masks" / path.relative_to(tmp_path / "images" / "val")
        target.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(mask).save(target)
    config = _folder_config(tmp_path)
    model = timm.create_model("crate_nano_patch4_32", num_classes=2)
    data = load_data(str(config), model, masks=str(tmp_path / "masks"))
    assert data.val_masks.shape == (4, 32, 32)
    columns = data.val_masks.float().mean(dim=(0, 1))
    assert columns[:14].min() == 1 and columns[18:].max() == 0  # the left half stays the left half
    first = next((tmp_path / "masks").rglob("*.png"))
    Image.fromarray(np.zeros((24, 20), dtype=np.uint8)).save(first)  # turned: not its image's 24x20 pixels
    with pytest.raises(ValueError, match=r"is 20x24 pixels and its image .* 24x20: save each mask at its image's"):
        load_data(str(config), model, masks=str(tmp_path / "masks"))
    first.unlink()
    with pytest.raises(FileNotFoundError, match="no mask for"):
        load_data(str(config), model, masks=str(tmp_path / "masks"))
    with pytest.raises(ValueError, match="strokes"):
        load_data("digits", model, masks=str(tmp_path / "masks"))


def test_a_mask_is_found_by_its_image_s_whole_name_and_a_jpeg_one_is_warned_of(tmp_path: Path) -> None:
    """``shot.0.png``'s mask is ``shot.0.png`` (or ``.jpg``) in the mask folder, not ``shot.png`` (a name with dots
    lost all after its first dot, and another image's mask was read without a word); JPEG masks, whose compression
    leaves grey values along the edges that count as foreground, are warned of."""
    write_image_folder(tmp_path / "images", classes=2, per_class=2)
    images = sorted((tmp_path / "images" / "val").rglob("*.png"))
    left, right = np.zeros((20, 24), dtype=np.uint8), np.zeros((20, 24), dtype=np.uint8)
    left[:, :12], right[:, 12:] = 255, 255
    for path in images:
        dotted = path.with_name(f"shot.{path.stem}.png")
        path.rename(dotted)
        target = tmp_path / "masks" / dotted.relative_to(tmp_path / "images" / "val")
        target.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(left).save(target)
        Image.fromarray(right).save(target.with_name("shot.png"))  # what the name cut at its first dot would find
    config, model = _folder_config(tmp_path), timm.create_model("crate_nano_patch4_32", num_classes=2)
    data = load_data(str(config), model, masks=str(tmp_path / "masks"))
    columns = data.val_masks.float().mean(dim=(0, 1))
    assert columns[:14].min() == 1 and columns[18:].max() == 0  # each image's own mask: the left half
    first = next((tmp_path / "masks").rglob("shot.*.png"))
    edge = np.zeros((20, 24), dtype=np.uint8)
    edge[:, :13] = 255  # an edge inside an 8x8 block: the compression blurs it
    first.unlink()
    Image.fromarray(edge).save(first.with_suffix(".jpg"), quality=75)
    with pytest.warns(
        UserWarning, match=r"JPEG masks \(1; the first .*shot\.\w+\.jpg\) hold values between 0 and their maximum"
    ):
        load_data(str(config), model, masks=str(tmp_path / "masks"))


def test_an_unreadable_image_of_a_folder_is_one_line_naming_it(tmp_path: Path) -> None:
    """The folder's survey reads the training images' headers: a corrupt one is the DataModule's line naming the
    file (a ValueError the command prints in one line), not the image library's error beneath it."""
    write_image_folder(tmp_path / "images", classes=2, per_class=2)
    broken = tmp_path / "images" / "train" / "class_1" / "0.png"
    broken.write_bytes(b"not an image")
    model = timm.create_model("crate_nano_patch4_32", num_classes=2)
    with pytest.raises(ValueError, match=f"cannot read image {broken} .*; replace or remove the file"):
        load_data(str(_folder_config(tmp_path)), model)


def test_a_limit_samples_each_digits_split_and_accuracy_still_reads_the_whole_validation_split() -> None:
    model = timm.create_model("crate_nano_patch4_32", num_classes=10, in_chans=1, img_size=16)
    whole, part = load_data("digits", model), load_data("digits", model, limit=50)
    assert len(part.train_images) == len(part.val_images) == 50
    assert len(part.val_set) == len(whole.val_set) == len(whole.val_images) == 360
    val, train = sample_order(360, 50), sample_order(len(whole.train_images), 50)
    assert torch.equal(part.val_images, whole.val_images[val]) and torch.equal(part.val_labels, whole.val_labels[val])
    assert torch.equal(part.val_masks, whole.val_masks[val])  # each image keeps its own strokes
    assert torch.equal(part.train_images, whole.train_images[train])
    assert torch.equal(part.train_labels, whole.train_labels[train])


def test_lenses_read_a_class_mixed_sample_of_an_image_folder_and_each_mask_stays_with_its_image(
    tmp_path: Path,
) -> None:
    """An image folder lists its images class by class; the lenses read a seeded random sample of it (not its
    first images, all of one class), and a mask still belongs to the image it was drawn for."""
    rng = np.random.default_rng(1)
    for split in ("train", "val"):
        for c in range(3):
            for i in range(8):
                blocks = rng.integers(0, 2, size=(5, 6), dtype=np.uint8) * 255  # 4x4-pixel blocks: 20 x 24
                pixels = np.kron(blocks, np.ones((4, 4), dtype=np.uint8))
                path = tmp_path / "images" / split / f"class_{c}" / f"{i}.png"
                path.parent.mkdir(parents=True, exist_ok=True)
                Image.fromarray(pixels).convert("RGB").save(path)
                if split == "val":  # the mask is the image's own bright blocks
                    target = tmp_path / "masks" / f"class_{c}" / f"{i}.png"
                    target.parent.mkdir(parents=True, exist_ok=True)
                    Image.fromarray(pixels).save(target)
    config = _folder_config(tmp_path)
    model = timm.create_model("crate_nano_patch4_32", num_classes=3)
    data = load_data(str(config), model, limit=6, masks=str(tmp_path / "masks"))
    order = sample_order(24, 6)
    assert len(set(order)) == 6 and max(order) < 24
    assert data.val_labels.tolist() == [data.val_set.targets[i] for i in order]
    assert len(set(data.val_labels.tolist())) > 1 and len(set(data.train_labels.tolist())) > 1  # classes mixed
    for j, i in enumerate(order):
        assert torch.equal(data.val_images[j], data.val_set[i][0])
    bright = data.val_images.mean(dim=1) > data.val_images.mean()  # (6, 32, 32)
    agreement = (bright[:, None] == data.val_masks[None, :]).float().mean(dim=(2, 3))  # image x mask
    assert agreement.diagonal().min() > 0.9 and (agreement - torch.eye(6)).max() < 0.8


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report")
    vit = REPO / "checkpoints" / "vit_nano_patch4_32.digits.safetensors"
    main(
        ["--model", "crate_nano_patch4_32.digits", "--data", "digits", "--out", str(out), "--probe-images", "32"]
        + ["--sample-images", "400"]  # the probes fit on 400 of the 1,437 training images; val (360) is whole
        + ["--count-seeds", "4"]  # the counts' seeds: the figures' three and one more
        + ["--compare", "vit_nano_patch4_32", str(vit), "--compare", "crate_alpha_nano_patch4_32.digits", "-"]
    )
    return out


def test_report_numbers_are_finite_in_range_and_those_of_the_monitor(report: Path) -> None:
    metrics = json.loads((report / "metrics.json").read_text())
    assert set(metrics) == {"crate_nano_patch4_32.digits", "vit_nano_patch4_32", "crate_alpha_nano_patch4_32.digits"}
    for result in metrics.values():  # --count-seeds 4: the counts under seeds 0-3
        assert list(result["controls"]["random_init"]["null_counts_per_seed"]) == ["0", "1", "2", "3"]
    said = re.findall(
        r"are read against (.+?), which another untrained draw would all pass one time in (\d+)(;[^.]*)?\.",
        (report / "report.md").read_text(),
    )
    assert said == [("seeds 0-3", "5", "; with fewer than 19 seeds no count is a finding")]  # not the default's 0-18
    for label, result in metrics.items():
        assert 0.9 <= result["val_accuracy"] <= 1.0, label
        for convention in ("official", "paper"):
            curves = result["layerwise"][convention]
            assert set(curves) == set(QUANTITIES)
            for key, values in curves.items():
                assert len(values) == 4
                assert all(v is None or math.isfinite(v) for v in values), (label, key)
        for layer in result["attention"]:
            assert all(0 <= v <= 1 for v in layer["negative_mass"] + layer["top_k_mass"] + layer["kernel_agreement"])
            assert all(1 - 1e-9 <= v <= 65 for v in layer["effective_rank"])
            assert all(0 <= v <= math.log(65) + 1e-9 for v in layer["entropy"])
        segmentation = result["segmentation"]
        assert set(segmentation["layers"]) == {"2", "3"}
        for scores in segmentation["layers"].values():
            assert scores["best_head_iou"] == max(scores["per_head"])
            assert 0 <= scores["chance"] <= 1
        assert all(0 <= v <= 1 for v in result["linear_probe_accuracy"])
        controls = result["controls"]  # under names that say what they are
        assert controls["random_init"]["init_seeds"] == [0, 1, 2]
        for key in ("layerwise", "attention", "seeds", "segmentation", "geometry"):
            assert key in controls["random_init"], key
        compression = controls["compression"]["official"]
        assert compression["fractions"] == [0.01, 0.05, 0.25, 1.0] and compression["draws"] == 8
        for name in ("trained", "negated", "mean_removed", "shared_null", "iid_null"):
            assert len(compression[name]["change"]) == len(compression[name]["slope"]) == 4
            assert all(len(change) == 4 and all(map(math.isfinite, change)) for change in compression[name]["change"])
        has_steps = result["shared_query_key"]  # the subspace steps only where the model has U_[K]
        assert all((slope is not None) == has_steps for slope in compression["theory_step"]["slope"]), label
        assert controls["uniform_map"]["redundancy"] == pytest.approx(1.0)
    crate_result = metrics["crate_nano_patch4_32.digits"]
    assert crate_result["shared_query_key"] and not metrics["vit_nano_patch4_32"]["shared_query_key"]
    assert "random_dictionary" in crate_result["geometry"]
    assert all(v is None for v in metrics["vit_nano_patch4_32"]["layerwise"]["official"]["sparsity_of_code"])
    # one place computes per-layer values: the report's figures are the monitor's on the same images
    model = timm.create_model("crate_nano_patch4_32.digits", pretrained=True).eval()
    images = load_data("digits", model).val_images[:32]
    monitored = layer_rate_values(model, images, convention="official")
    for layer, value in enumerate(crate_result["layerwise"]["official"]["Rc_after_attention"]):
        # (the report traces with explicit attention, the monitor with SDPA: float32 rounding apart)
        assert value == pytest.approx(monitored[f"rate/Rc_after_attention/layer_{layer}"], rel=1e-6)


def test_report_files_exist_and_every_png_is_an_image(report: Path) -> None:
    text = (report / "report.md").read_text()
    pngs = sorted(report.glob("*.png"))
    assert len(pngs) == 4 + 3 * 6  # three models
    expected_sizes = {  # width and the panels' height; the figures with a legend below grow by its rows
        "layerwise.png": (1920, 1550),  # four panels on top; below, each model beside its controls, full step and slope
        "lenses.png": (1900, 460),
        "seeds.png": (1300, 460),
        "probe.png": (600, 420),
    }
    for png in pngs:
        assert f"({png.name})" in text, f"{png.name} is not shown in report.md"
        with Image.open(png) as image:
            image.verify()
        with Image.open(png) as image:
            assert image.format == "PNG" and min(image.size) >= 100
            if png.name in expected_sizes:
                width, height = expected_sizes[png.name]
                assert image.size[0] == width and height <= image.size[1] <= height + 200, png.name
    assert "0 by construction" in text  # CRATE's symmetric PSD kernel is not presented as a finding
    controls = ("random init", "update negated", "shared null", "i.i.d. null", "theory step", "uniform map")
    for control in (*controls, "(random init)", "beyond the shared-vector null"):
        assert control in text, control  # every figure beside its controls


def test_bad_or_mismatched_checkpoint_gets_a_clear_error(tmp_path: Path, capsys) -> None:
    corrupt = tmp_path / "corrupt.safetensors"
    corrupt.write_bytes(b"\x00" * 100)
    micro = REPO / "checkpoints" / "crate_micro_patch4_32.digits.safetensors"
    cases = [
        (["--model", "crate_nano_patch4_32", "--checkpoint", str(corrupt)], "corrupt"),
        (["--model", "crate_nano_patch4_32", "--checkpoint", str(micro)], "does not fit"),
        (["--model", "vit_nano_patch4_32", "--checkpoint", str(micro)], "does not fit"),
        (["--model", "crate_nano_patch4_32", "--checkpoint", str(tmp_path / "none.pth")], "does not exist"),
    ]
    for args, message in cases:
        with pytest.raises(SystemExit) as exit_info:
            main([*args, "--out", str(tmp_path / "out")])
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err, args


def test_a_bad_hub_folder_name_is_one_line_before_anything_loads(tmp_path: Path, capsys) -> None:
    hub, other = tmp_path / "hub", tmp_path / "no_config"
    hub.mkdir()
    other.mkdir()
    weights = str(REPO / "checkpoints" / "crate_nano_patch4_32.digits.safetensors")
    cases = [
        ("not json {", ["--model", f"local-dir:{hub}"], "config.json is not a readable timm config.json"),
        ('{"num_classes": 10}', ["--model", f"local-dir:{hub}"], "names no architecture"),
        ('["a list"]', ["--model", f"local-dir:{hub}"], "is not a readable timm config.json"),
        ("", ["--model", f"local-dir:{tmp_path / 'none'}"], "is not a folder"),
        ("", ["--model", f"local-dir:{other}"], "holds no config.json, so it is not a hub folder"),
        ("", ["--model", f"local-dir:{hub}", "--checkpoint", weights], "brings its own weights"),
        ("", ["--model", "crate_nano_patch4_32", "--checkpoint", str(hub)], f"pass its weights file ({hub}/"),
        # the folder by its timm name where a file belongs
        ("", ["--model", "crate_nano_patch4_32", "--checkpoint", f"local-dir:{hub}"], "not a checkpoint file: pass"),
        ("", ["--model", "crate_nano_patch4_32", "--checkpoint", "hf-hub:org/name"], "timm.create_model('hf-hub:"),
    ]

    def refused(args: list[str], message: str) -> None:
        with pytest.raises(SystemExit) as exit_info:
            main([*args, "--out", str(tmp_path / "out")])
        error = capsys.readouterr().err.strip()
        assert exit_info.value.code == 2 and len(error.splitlines()) == 1, args
        assert error.startswith("crate-interpret: error: ") and message in error, (args, error)
        assert not (tmp_path / "out").exists()

    for config, args, message in cases:
        if config:
            (hub / "config.json").write_text(config)
        refused(args, message)
    # a good config over weights that are truncated, or another model's: the folder's weights read as any file
    (hub / "config.json").write_text('{"architecture": "crate_nano_patch4_32"}')
    vit = (REPO / "checkpoints" / "vit_nano_patch4_32.digits.safetensors").read_bytes()
    for contents, message in [(vit[:1000], "is corrupt or truncated"), (vit, "does not fit crate_nano_patch4_32")]:
        (hub / "model.safetensors").write_bytes(contents)
        refused(["--model", f"local-dir:{hub}"], message)


def test_a_figure_s_file_name_is_one_path_component_whatever_the_label() -> None:
    from crate.interpret.report import figure_tag

    assert figure_tag(0, "crate_nano_patch4_32.digits") == "0_crate_nano_patch4_32"
    for index, label in enumerate(["local-dir:/runs/my.hub", "hf-hub:org/name@v1", "C:\\models\\x"]):
        tag = figure_tag(index, label)
        assert Path(tag).name == tag and "/" not in tag and ":" not in tag and "\\" not in tag, tag
    assert figure_tag(1, "local-dir:/runs/my.hub") != figure_tag(1, "local-dir:/runs/my.other")


def test_the_time_left_grows_with_the_layers_left_to_measure() -> None:
    from crate.interpret.report import _seconds_left

    assert _seconds_left(0.0, [4, 4], 0) is None  # nothing timed yet
    assert _seconds_left(300.0, [4, 4, 4], 1) == pytest.approx(600.0)  # equal depths: the models' mean time each
    # an 8-layer model after a 3- and a 4-layer one that took 12 minutes: 8/7 of that, not half of it
    assert _seconds_left(720.0, [3, 4, 8], 2) == pytest.approx(720.0 * 8 / 7)


@pytest.mark.slow
def test_report_on_a_model_without_attention_maps_next_to_one_with(tmp_path: Path) -> None:
    from crate.interpret.report import write_report

    torch.manual_seed(0)
    tost = timm.create_model("tost_nano_patch4_32", num_classes=10, in_chans=1).eval()
    vit = timm.create_model("vit_nano_patch4_32_sh", num_classes=10, in_chans=1).eval()
    data = load_data("digits", tost, limit=64)
    metrics = write_report(
        {"tost": (tost, data), "vit_sh": (vit, data)}, tmp_path, images=2, probe_images=16, count_seeds=3
    )
    assert all(layer is None for layer in metrics["tost"]["attention"])  # TSSA forms no token-by-token maps
    assert metrics["tost"]["segmentation"] is None and metrics["tost"]["seeds"][0]["subsampling_error"] == []
    assert all(math.isfinite(v) for v in metrics["tost"]["layerwise"]["official"]["Rc_before_attention"])
    assert all(layer is not None for layer in metrics["vit_sh"]["attention"])
    text = (tmp_path / "report.md").read_text()
    assert "n/a (no attention maps)" in text
    assert not list(tmp_path.glob("attention_*_0_tost.png")) and list(tmp_path.glob("attention_*_1_vit_sh.png"))


@pytest.mark.parametrize(
    ("model", "expected", "absent"),
    [
        (
            "crate_nano_patch4_32.cifar1O",
            "its tags (crate_nano_patch4_32.cifar10, crate_nano_patch4_32.cifar10_10k_objective, "
            "crate_nano_patch4_32.cifar10_simdino, "
            "crate_nano_patch4_32.digits, crate_nano_patch4_32.digits_objective)",
            "",
        ),
        ("crate_nano_patch4_23", "Close matches: crate_nano_patch4_32", "crate_nano_patch4_23.digits"),
        ("crate_nano_patch4_32_bn", "has no pretrained weights: give a checkpoint file", ".digits"),
    ],
    ids=["mistyped-tag", "mistyped-model", "no-weights"],
)
def test_an_unknown_model_or_tag_is_one_line_naming_what_exists(
    model: str, expected: str, absent: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from crate.interpret.__main__ import main

    with pytest.raises(SystemExit) as stopped:
        main(["--model", model, "--out", str(tmp_path / "report")])
    assert stopped.value.code == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("crate-interpret: error: ") and len(error.splitlines()) == 1
    assert expected in error and (not absent or absent not in error)
    assert not (tmp_path / "report").exists()


@pytest.mark.parametrize(
    ("flag", "value", "expected"),
    [
        ("--eps-official", "-1", "-1 is not a precision: give a finite number above 0"),
        ("--eps-paper", "nan", "nan is not a precision: give a finite number above 0"),
        ("--eps-paper", "0", "0 is not a precision: give a finite number above 0"),
        ("--probe-images", "0", "0 is not a count: give 1 or more"),
        ("--sample-images", "-5", "-5 is not a count: give 1 or more"),
        ("--images", "0", "0 is not a count: give 1 or more"),
        ("--count-seeds", "0", "0 is not a count: give 1 or more"),
        ("--images", "two", "'two' is not a whole number"),
    ],
)
def test_a_count_or_precision_out_of_range_is_refused_by_name_before_anything_loads(
    flag: str, value: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A negative or non-finite eps would give coding rates of another precision (eps enters squared) or NaN,
    and a count below 1 an empty sample; each is refused by name before a model is loaded."""
    with pytest.raises(SystemExit) as stopped:
        main(["--model", "crate_nano_patch4_32.digits", "--out", str(tmp_path / "report"), flag, value])
    assert stopped.value.code == 2
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines()[-1] == f"crate-interpret: error: argument {flag}: {expected}"
    assert "loading" not in captured.out and not (tmp_path / "report").exists()


def test_a_report_folder_under_a_file_is_refused_before_anything_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("not a folder")
    for out in (tmp_path / "file", tmp_path / "file" / "report"):
        with pytest.raises(SystemExit) as stopped:
            main(["--model", "crate_nano_patch4_32.digits", "--out", str(out)])
        assert stopped.value.code == 2
        captured = capsys.readouterr()
        assert captured.err.strip().splitlines()[-1] == (
            f"crate-interpret: error: --out {out}: {tmp_path / 'file'} is a file, not a folder; give a folder for "
            "the report"
        )
        assert "loading" not in captured.out and (tmp_path / "file").read_text() == "not a folder"


def test_an_earlier_report_is_left_as_it_is_unless_overwrite_is_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report"
    for name in ("report.md", "metrics.json"):
        out.mkdir(exist_ok=True)
        (out / name).write_text("an earlier report")
        with pytest.raises(SystemExit) as stopped:
            main(["--model", "crate_nano_patch4_32.digits", "--out", str(out)])
        assert stopped.value.code == 2
        captured = capsys.readouterr()
        assert captured.err.strip().splitlines()[-1] == (
            f"crate-interpret: error: --out {out} already holds {name} of an earlier run, left as it is; pass "
            "--overwrite to replace the report, or give another --out"
        )
        assert "loading" not in captured.out and (out / name).read_text() == "an earlier report"
        (out / name).unlink()
    (out / "report.md").write_text("an earlier report")
    # with --overwrite the folder is taken: the run goes on to load the model (and stops at a later check)
    with pytest.raises(SystemExit):
        main(["--model", "crate_nano_patch4_32.digits", "--out", str(out), "--overwrite", "--sample-images", "1"])
    captured = capsys.readouterr()
    assert "loading crate_nano_patch4_32.digits" in captured.out and "--sample-images" in captured.err


def test_a_training_sample_of_one_class_is_refused_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One sampled training image is one class: the linear probe cannot be fitted, and the error says which
    setting gives it more."""
    with pytest.raises(SystemExit) as stopped:
        main(["--model", "crate_nano_patch4_32.digits", "--out", str(tmp_path / "report"), "--sample-images", "1"])
    assert stopped.value.code == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    assert "training images sampled (1) hold one class only" in error and "--sample-images" in error
    assert not (tmp_path / "report").exists()


def test_the_layerwise_figure_draws_each_model_beside_its_controls() -> None:
    """From the committed CIFAR-10 report's numbers: a panel per model with the attention step's change of
    R^c trained, untrained and along every control's direction at full step, and a panel of the slopes at 0,
    each curve the numbers themselves; layer axes ticked at whole layers."""
    from crate.interpret.plots import CONTROL_STYLES, layerwise_figure

    results = json.loads((REPO / "docs" / "interpret_cifar10" / "metrics.json").read_text())
    figure = layerwise_figure(results)
    full_panels = [axis for axis in figure.axes if "after - before" in axis.get_title()]
    slope_panels = [axis for axis in figure.axes if "slope at t = 0" in axis.get_title()]
    assert len(full_panels) == len(slope_panels) == len(results)
    labels = {name: label for name, label, *_ in CONTROL_STYLES}
    for full, slopes, (label, result) in zip(full_panels, slope_panels, results.items(), strict=True):
        assert label in full.get_title() and label in slopes.get_title()
        curves = result["layerwise"]["official"]
        before = np.array(curves["Rc_before_attention"])
        initial = result["controls"]["random_init"]["layerwise"]["official"]
        summary = result["controls"]["compression"]["official"]
        expected_full = {
            "trained": np.array(curves["Rc_after_attention"]) - before,
            "untrained (3 init seeds)": np.array(initial["Rc_after_attention"])
            - np.array(initial["Rc_before_attention"]),
        }
        expected_slopes = {"trained": np.array(summary["trained"]["slope"])}
        for name, label_of in labels.items():
            if summary[name]["slope"][0] is None:  # no subspace steps for the ViT
                assert not result["shared_query_key"] and name in ("theory_step", "subspace_output")
                continue
            expected_full[label_of] = np.array([change[-1] for change in summary[name]["change"]])
            expected_slopes[label_of] = np.array(summary[name]["slope"])
        for axis, expected in ((full, expected_full), (slopes, expected_slopes)):
            lines = {
                line.get_label(): line.get_ydata() for line in axis.get_lines() if not line.get_label().startswith("_")
            }
            assert lines.keys() == expected.keys()
            for name, values in expected.items():
                np.testing.assert_allclose(lines[name], values)
            ticks = axis.get_xticks()
            assert np.all(ticks == np.round(ticks))


def test_interpret_refuses_a_comparison_of_other_inputs_and_lists_data_settings(tmp_path, capsys) -> None:
    from crate.interpret.__main__ import main as interpret_main

    with pytest.raises(SystemExit) as exit_info:
        interpret_main(["--help"])
    assert exit_info.value.code == 0 and "--data.KEY VALUE" in capsys.readouterr().out
    out = tmp_path / "report"
    args = ["--model", "crate_nano_patch4_32.digits", "--out", str(out)]
    args += ["--compare", "crate_nano_patch4_32.cifar10", "-"]
    with pytest.raises(SystemExit) as exit_info:
        interpret_main(args)
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert "crate-interpret: loading crate_nano_patch4_32.digits" in captured.out  # it says what it is doing
    refusal = captured.err.strip().splitlines()
    assert len(refusal) == 1 and "takes inputs of (3, 32, 32)" in refusal[0] and "(1, 32, 32)" in refusal[0]
    assert not out.exists()


def test_a_checkpoint_file_given_as_the_model_is_one_line_with_the_flags_that_evaluate_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The architecture named is the one the file records (read here with the zoo's reader), for --model and
    --compare alike; a file that is no checkpoint says so."""
    from crate.interpret.__main__ import main
    from crate.models import read_checkpoint

    shipped = str(REPO / "checkpoints" / "crate_nano_patch4_32.digits.safetensors")
    other = str(REPO / "checkpoints" / "vit_nano_patch4_32.digits.safetensors")
    junk = tmp_path / "notes.txt"
    junk.write_text("not weights")
    tag = "crate_nano_patch4_32.digits"
    # the architecture without the tag the file may record: the file gives the weights (a run fine-tuned from a tag
    # records the tag's name)
    cases = [
        (["--model", shipped], f"--model {read_checkpoint(shipped).model_name.split('.')[0]} --checkpoint {shipped})"),
        (
            ["--model", tag, "--compare", other, "-"],
            f"--compare {read_checkpoint(other).model_name.split('.')[0]} {other})",
        ),
        (["--model", str(junk)], "is a file, and not a readable checkpoint"),
    ]
    for args, said in cases:
        with pytest.raises(SystemExit) as stopped:
            main([*args, "--out", str(tmp_path / "report")])
        error = capsys.readouterr().err.strip()
        assert stopped.value.code == 2 and len(error.splitlines()) == 1, error
        assert error.startswith("crate-interpret: error: ") and said in error, error
        assert not (tmp_path / "report").exists()


@pytest.mark.parametrize("name", ["crate_nano_patch4_32", "crate_cct2_3x2_32"])
def test_the_attention_maps_are_the_class_token_s_or_what_each_patch_receives_and_say_which(
    name: str,
) -> None:
    """With a class token, its row of the last layer's maps over the patches; with sequence pooling (no class
    token), each patch's column averaged over the queries, computed here from the traced maps in float64; the
    figure's title names which of the two it shows."""
    from crate.interpret import plots
    from crate.interpret.evaluate import attention_shown, class_attention

    torch.manual_seed(0)
    model = timm.create_model(name, num_classes=10).eval()
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        traces = trace_model(model, images)
    maps = traces[-1].attention.to(torch.float64).numpy()  # (B, K, N, N) over every token
    prefix = model.num_prefix_tokens
    expected = maps[:, :, 0, prefix:] if prefix else maps.mean(axis=2)
    shown = class_attention(traces[-1:], prefix)[0]
    np.testing.assert_allclose(shown.to(torch.float64).numpy(), expected, rtol=1e-6, atol=1e-9)
    title = attention_shown(prefix)
    assert (title == "class-token attention") == bool(prefix)
    figure = plots.attention_figure(name, list(images), shown.float(), model.patch_embed.grid_size, 0, title)
    assert figure._suptitle.get_text().startswith(f"{name}: {title}, layer 0")


def test_an_encoder_without_a_head_is_reported_without_an_accuracy(tmp_path: Path, capsys) -> None:
    """A checkpoint with no classifier (a self-supervised encoder) gets its report and the closing line says
    its accuracy is not defined (it ended in a traceback once the report was written)."""
    from safetensors.torch import save_file

    torch.manual_seed(0)
    encoder = timm.create_model("crate_nano_patch4_32", num_classes=0, in_chans=1)
    save_file(encoder.state_dict(), tmp_path / "encoder.safetensors")
    out = tmp_path / "report"
    main(
        ["--model", "crate_nano_patch4_32", "--checkpoint", str(tmp_path / "encoder.safetensors"), "--data", "digits"]
        + ["--out", str(out), "--probe-images", "16", "--sample-images", "100", "--images", "1", "--count-seeds", "3"]
    )
    assert "crate_nano_patch4_32: val accuracy n/a (no head)" in capsys.readouterr().out.splitlines()
    assert json.loads((out / "metrics.json").read_text())["crate_nano_patch4_32"]["val_accuracy"] is None
    assert "| validation accuracy | n/a (no head) |" in (out / "report.md").read_text()


@pytest.mark.parametrize("long_labels", [False, True], ids=["as_committed", "long_labels"])
def test_every_panel_and_legend_of_the_summary_figures_fits_in_the_figure(long_labels: bool) -> None:
    """The layer-wise, lenses, seeds and probe figures of the committed three-model CIFAR-10 report (and the
    same with hub-folder-long labels): every panel keeps at least 1.5 inches a side and every legend lies inside
    the figure (the lenses' five panel legends once squeezed their panels to a tenth of an inch, and the probe's
    and seeds' legends ran off the image)."""
    import warnings

    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from crate.interpret import plots

    results = json.loads((REPO / "docs" / "interpret_cifar10" / "metrics.json").read_text())
    if long_labels:
        results = {f"local-dir:/home/someone/hub-folders/exports/{label}": r for label, r in results.items()}
    for draw in (plots.layerwise_figure, plots.lenses_figure, plots.seeds_figure, plots.probe_figure):
        figure = draw(results)
        FigureCanvasAgg(figure)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # "constrained_layout not applied because axes sizes collapsed"
            figure.canvas.draw()
        width, height = figure.get_size_inches()
        for axis in figure.axes:
            if axis.axison:
                box = axis.get_position()
                assert min(box.width * width, box.height * height) >= 1.5, (draw.__name__, axis.get_title())
        renderer = figure.canvas.get_renderer()
        legends = list(figure.legends) + [s for sub in figure.subfigs for s in sub.legends]
        legends += [axis.get_legend() for axis in figure.axes if axis.get_legend() is not None]
        assert legends, draw.__name__
        for legend in legends:
            extent = legend.get_window_extent(renderer)
            inside = figure.bbox.x0 - 1 <= extent.x0 and extent.x1 <= figure.bbox.x1 + 1
            assert inside and figure.bbox.y0 - 1 <= extent.y0 and extent.y1 <= figure.bbox.y1 + 1, draw.__name__


@pytest.mark.slow
def test_a_comparison_of_models_read_on_different_data_names_each_model_s_data(tmp_path: Path) -> None:
    """Without --data each model is evaluated on its own run's data: the digits tag on split 0, a run on split 1.
    The report named the first model's data for all; it now names each model's, and one data set where they
    share it."""
    from crate.lit import cli_main

    digits = str(Path(__file__).resolve().parents[1] / "configs" / "crate_nano_digits.yaml")
    quiet = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
    cli_main(
        ["fit", "--config", digits, "--data.split_seed", "1", "--data.img_size", "32", "--trainer.max_epochs", "1",
         "--trainer.limit_train_batches", "1", "--log_root", str(tmp_path), "--run_name", "split1", *quiet]
    )  # fmt: skip
    ckpt = str(tmp_path / "split1" / "version_0" / "checkpoints" / "last.ckpt")
    quick = ["--sample-images", "8", "--probe-images", "8", "--count-seeds", "2", "--images", "2"]
    tag = "crate_nano_patch4_32.digits"
    main(["--model", tag, "--compare", "crate_nano_patch4_32", ckpt, "--out", str(tmp_path / "mixed"), *quick])
    header = (tmp_path / "mixed" / "report.md").read_text().splitlines()[2]
    assert "Each model was read on its own run's data" in header and "Data: " not in header, header
    assert f"`{tag}` on digits (val_fraction=0.2, split_seed=0)" in header, header
    assert "`crate_nano_patch4_32` on digits (val_fraction=0.2, split_seed=1)" in header, header
    main(["--model", tag, "--compare", tag, "-", "--out", str(tmp_path / "same"), *quick])
    header = (tmp_path / "same" / "report.md").read_text().splitlines()[2]
    assert header.count("Data: digits (val_fraction=0.2, split_seed=0).") == 1 and "own run's data" not in header


def test_report_counts_a_masked_pretraining_decoder_apart() -> None:
    """A CRATE-MAE pretraining model is read as its encoder: the report gives the decoder's share of the
    parameters apart, and the encoder's count is that of the same encoder built without a decoder."""
    from crate.interpret.evaluate import _decoder_parameters
    from crate.interpret.report import _parameters

    encoder = timm.create_model("crate_mae_nano_patch4_32", num_classes=0)
    pretraining = timm.create_model("crate_mae_nano_patch4_32", num_classes=0, decoder_depth=2)
    total, alone = (sum(p.numel() for p in m.parameters()) for m in (pretraining, encoder))
    decoder = _decoder_parameters(pretraining)
    assert _decoder_parameters(encoder) == 0 and total - decoder == alone > 0
    assert _parameters({"parameters": total, "decoder_parameters": decoder}) == (
        f"{total:,} (encoder {alone:,}, decoder {total - alone:,})"
    )
    assert _parameters({"parameters": alone, "decoder_parameters": 0}) == f"{alone:,}"
