"""Interpretability evaluation: statistics against numpy, properties of CRATE, and the full report."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from PIL import Image

import crate  # noqa: F401
from crate.interpret import layer_attention
from crate.interpret.__main__ import main
from crate.interpret.geometry import dictionary_coherence, gram_identity_distance, subspace_coherence
from crate.interpret.lenses import head_redundancy, kernel_asymmetry, kernel_negative_mass, row_entropy, top_k_mass

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


def test_kernel_and_attention_lenses_equal_numpy() -> None:
    rng = np.random.default_rng(2)
    S = rng.standard_normal((2, 3, 6, 6))
    A = torch.from_numpy(S).softmax(-1).numpy()
    St = torch.from_numpy(S)
    asym = kernel_asymmetry(St).numpy()
    neg = kernel_negative_mass(St).numpy()
    red = head_redundancy(torch.from_numpy(A)).numpy()
    ent = row_entropy(torch.from_numpy(A)).numpy()
    top = top_k_mass(torch.from_numpy(A), 2).numpy()
    for b in range(2):
        cosines = []
        for h in range(3):
            s = S[b, h]
            assert asym[b, h] == pytest.approx(np.linalg.norm(s - s.T) / np.linalg.norm(s), rel=1e-12)
            lam = np.linalg.eigvalsh((s + s.T) / 2)
            assert neg[b, h] == pytest.approx(np.abs(lam[lam < 0]).sum() / np.abs(lam).sum(), rel=1e-12)
            assert ent[b, h] == pytest.approx(-(A[b, h] * np.log(A[b, h])).sum(-1), rel=1e-12)
            assert top[b, h] == pytest.approx(np.sort(A[b, h], axis=-1)[:, -2:].sum(-1), rel=1e-12)
            for g in range(3):
                if g != h:
                    x, y = A[b, h].ravel(), A[b, g].ravel()
                    cosines.append(x @ y / np.linalg.norm(x) / np.linalg.norm(y))
        assert red[b] == pytest.approx(np.mean(cosines), rel=1e-12)


def test_crate_kernel_is_symmetric_psd_and_vit_kernel_is_not() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 3, 32, 32)
    crate_layers = layer_attention(timm.create_model("crate_nano_patch4_32").eval(), x)
    vit_layers = layer_attention(timm.create_model("vit_nano_patch4_32").eval(), x)
    for layer in crate_layers:
        assert kernel_asymmetry(layer.kernel).max() < 1e-12
        assert kernel_negative_mass(layer.kernel).max() < 1e-9
        torch.testing.assert_close(layer.attention.sum(-1), torch.ones_like(layer.attention[..., 0]))
    assert min(kernel_asymmetry(layer.kernel).min() for layer in vit_layers) > 0.05


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report")
    vit = REPO / "checkpoints" / "vit_nano_patch4_32.digits.safetensors"
    main(
        ["--model", "crate_nano_patch4_32.digits", "--data", "digits", "--out", str(out), "--probe-images", "32"]
        + ["--compare", "vit_nano_patch4_32", str(vit)]
    )
    return out


def test_report_numbers_are_finite_and_in_range(report: Path) -> None:
    metrics = json.loads((report / "metrics.json").read_text())
    assert set(metrics) == {"crate_nano_patch4_32.digits", "vit_nano_patch4_32"}
    for label, result in metrics.items():
        assert 0.9 <= result["val_accuracy"] <= 1.0, label
        curves = result["layerwise"]
        assert len(curves["R"]) == 4
        for key, values in curves.items():
            assert all(math.isfinite(v) for v in values), (label, key)
        assert all(v >= 0 for v in curves["R"] + curves["Rc_before_attention"] + curves["Rc_after_attention"])
        assert all(0 <= v <= 1 for v in curves["sparsity_before_mlp"] + curves["sparsity_after_mlp"])
        for layer in result["attention"]:
            assert all(0 <= v for v in layer["asymmetry"])
            assert all(0 <= v <= 1 for v in layer["negative_mass"] + layer["top_k_mass"])
            assert all(0 <= v <= math.log(65) + 1e-9 for v in layer["entropy"])
            assert -1 <= layer["redundancy"] <= 1
        for matrix in result["geometry"]["subspace_coherence"]:
            assert all(-1e-9 <= v <= 1 + 1e-9 for row in matrix for v in row)
        assert all(0 <= v <= 1 for v in result["linear_probe_accuracy"])
    crate_result = metrics["crate_nano_patch4_32.digits"]
    assert "dictionary_coherence" in crate_result["geometry"]
    assert min(crate_result["layerwise"]["sparsity_after_mlp"]) > 0.2  # ISTA ends in a ReLU
    assert max(metrics["vit_nano_patch4_32"]["layerwise"]["sparsity_after_mlp"]) < 0.01


def test_report_files_exist_and_every_png_is_an_image(report: Path) -> None:
    text = (report / "report.md").read_text()
    pngs = sorted(report.glob("*.png"))
    assert len(pngs) == 3 + 2 * 5
    expected_sizes = {"layerwise.png": (1500, 340), "lenses.png": (1500, 340), "probe.png": (500, 340)}
    for png in pngs:
        assert f"({png.name})" in text, f"{png.name} is not shown in report.md"
        with Image.open(png) as image:
            image.verify()
        with Image.open(png) as image:
            assert image.format == "PNG" and min(image.size) >= 100
            if png.name in expected_sizes:
                assert image.size == expected_sizes[png.name]


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
