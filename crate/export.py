"""Export a Lightning checkpoint of the zoo as a timm-loadable safetensors file with a model card.

    python -m crate.export logs/crate_nano_digits/version_0/checkpoints/last.ckpt \\
        --out checkpoints/crate_nano_patch4_32.digits.safetensors

(also installed as ``crate-export``). Writes ``NAME.safetensors``, the card ``NAME.md`` and its data
``NAME.json`` (architecture, data, recipe, epochs, validation accuracy measured on the exported file,
the command that produced it, sha256). Load the result with
``timm.create_model(model_name, pretrained=True, pretrained_cfg_overlay=dict(file=PATH))``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shlex
import sys
from pathlib import Path
from typing import Any

import timm
import torch
import yaml
from safetensors.torch import save_file

from crate.data.digits import load_digits_tensors
from crate.layers import patch_embed_in_chans
from crate.lit.factory import create_classifier
from crate.models import CRATE, Checkpoint, CheckpointError, ViTTwin, checkpoint_filter_fn, read_checkpoint

__all__ = ["digits_accuracy", "export_checkpoint", "main"]


def _read_lightning_checkpoint(path: Path) -> Checkpoint:
    held = read_checkpoint(path)
    if held.source != "lightning" or "model_name" not in held.hparams:
        raise CheckpointError(
            f"{held.describe()}: not a Lightning checkpoint of crate.lit.ImageClassifier; export works on the "
            ".ckpt files that train.py writes"
        )
    return held


def digits_accuracy(model: torch.nn.Module, img_size: int = 32, batch_size: int = 256) -> float:
    """Top-1 accuracy on the embedded digits validation split (the split DigitsDataModule uses)."""
    in_chans = patch_embed_in_chans(model.patch_embed)
    _, val = load_digits_tensors(img_size=img_size, in_chans=in_chans)
    model.eval()
    correct = 0
    with torch.no_grad():
        for start in range(0, len(val), batch_size):
            images, labels = val.images[start : start + batch_size], val.labels[start : start + batch_size]
            correct += int((model(images).argmax(dim=-1) == labels).sum())
    return correct / len(val)


def _run_config(ckpt: Path) -> dict[str, Any]:
    """The LightningCLI config.yaml of the run the checkpoint belongs to (``<run>/checkpoints/x.ckpt``)."""
    config = ckpt.resolve().parent.parent / "config.yaml"
    return yaml.safe_load(config.read_text()) if config.is_file() else {}


def _card_markdown(card: dict[str, Any]) -> str:
    recipe = "\n".join(f"| {k} | {v} |" for k, v in card["recipe"].items())
    accuracy = card["val_accuracy"]
    accuracy_line = f"{accuracy:.4f}" if accuracy is not None else "not measured (not digits data)"
    return f"""# {card["name"]}

- architecture: `{card["model_name"]}` ({card["parameters"]:,} parameters), input {card["input_size"]}, \
{card["num_classes"]} classes
- data: {card["data"]}
- trained: {card["epochs"]} epochs, {card["global_step"]} optimizer steps
- validation accuracy, measured on this file at export: **{accuracy_line}**
- load: `timm.create_model("{card["timm_name"]}", pretrained=True)` after `import crate`
- sha256 of `{card["file"]}`: `{card["sha256"]}`

## Recipe

| setting | value |
|---|---|
{recipe}

## How it was made

```bash
{card["train_command"]}
{card["export_command"]}
```
"""


DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def export_checkpoint(
    ckpt: str | Path, out: str | Path, train_command: str = "", dtype: str = "float32"
) -> dict[str, Any]:
    """Write ``out`` (safetensors, floating tensors stored as ``dtype``) and its card from a Lightning
    checkpoint; return the card's data. The card's accuracy is measured on the written file."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    ckpt, out = Path(ckpt), Path(out)
    if out.suffix != ".safetensors":
        raise ValueError(f"--out must end in .safetensors, got {out}")
    checkpoint = _read_lightning_checkpoint(ckpt)
    hp = checkpoint.lightning["hyper_parameters"]
    model = create_classifier(
        hp["model_name"],
        hp["num_classes"],
        hp.get("in_chans", 3),
        hp.get("img_size"),
        **(hp.get("model_kwargs") or {}),
    )
    if not isinstance(model, (CRATE, ViTTwin)):
        raise CheckpointError(
            f"{ckpt} holds {hp['model_name']}, a timm model outside the zoo: export writes zoo models, whose "
            "exported files timm loads back through the zoo; save this model's weights with "
            "timm.models.load_checkpoint / torch.save instead"
        )
    model.load_state_dict(checkpoint_filter_fn(checkpoint.state_dict, model))
    out.parent.mkdir(parents=True, exist_ok=True)
    state = {
        k: (v.to(DTYPES[dtype]) if v.is_floating_point() else v).contiguous() for k, v in model.state_dict().items()
    }
    save_file(state, str(out), metadata={"model_name": hp["model_name"], "format": "pt"})

    reloaded = timm.create_model(
        hp["model_name"],
        pretrained=True,
        pretrained_cfg_overlay=dict(
            file=str(out),
            num_classes=hp["num_classes"],
            input_size=(hp.get("in_chans", 3), *model.patch_embed.img_size),
        ),
        num_classes=hp["num_classes"],
        in_chans=hp.get("in_chans", 3),
        img_size=hp.get("img_size"),
        **(hp.get("model_kwargs") or {}),
    )
    config = _run_config(ckpt)
    data = config.get("data", {})
    is_digits = str(data.get("class_path", "")).endswith("DigitsDataModule")
    accuracy = digits_accuracy(reloaded, img_size=hp.get("img_size") or 32) if is_digits else None
    recipe_keys = (
        "optimizer",
        "lr",
        "min_lr_ratio",
        "weight_decay",
        "betas",
        "warmup_epochs",
        "label_smoothing",
    )
    recipe = {k: hp[k] for k in recipe_keys if k in hp}
    recipe.update({f"data.{k}": v for k, v in (data.get("init_args") or {}).items()})
    recipe["precision"] = (config.get("trainer") or {}).get("precision") or "32-true"
    recipe["seed"] = config.get("seed_everything")
    name = out.name[: -len(".safetensors")]
    card = {
        "name": name,
        "timm_name": name if "." in name else hp["model_name"],
        "model_name": hp["model_name"],
        "parameters": sum(p.numel() for p in model.parameters()),
        "num_classes": hp["num_classes"],
        "input_size": [hp.get("in_chans", 3), *model.patch_embed.img_size],
        "data": data.get("class_path", "unknown")
        + (" (scikit-learn digits, stratified 80/20 split)" if is_digits else ""),
        "epochs": checkpoint.lightning["epoch"] + 1,
        "global_step": checkpoint.lightning["global_step"],
        "val_accuracy": accuracy,
        "recipe": recipe,
        "file": out.name,
        "dtype": dtype,
        "sha256": hashlib.sha256(out.read_bytes()).hexdigest(),
        "train_command": train_command
        or f"# trained with the LightningCLI config {ckpt.resolve().parent.parent / 'config.yaml'}",
        "export_command": shlex.join(["python", "-m", "crate.export", *sys.argv[1:]]) if sys.argv[1:] else "",
    }
    out.with_suffix(".json").write_text(json.dumps(card, indent=2) + "\n")
    out.with_suffix(".md").write_text(_card_markdown(card))
    return card


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="crate-export", description=__doc__.split("\n")[0])
    parser.add_argument("checkpoint", help="a .ckpt written by train.py")
    parser.add_argument("--out", required=True, help="the .safetensors file to write (card written next to it)")
    parser.add_argument("--train-command", default="", help="the command that trained the checkpoint, for the card")
    parser.add_argument("--dtype", default="float32", choices=sorted(DTYPES), help="storage type of the weights")
    args = parser.parse_args(argv)
    try:
        card = export_checkpoint(args.checkpoint, args.out, args.train_command, args.dtype)
    except (FileNotFoundError, CheckpointError, ValueError) as err:
        parser.exit(2, f"crate-export: error: {err}\n")
    accuracy = card["val_accuracy"]
    print(
        f"wrote {args.out} ({card['parameters']:,} parameters"
        + (f", val accuracy {accuracy:.4f})" if accuracy is not None else ")")
    )


if __name__ == "__main__":
    main()
