"""The model card of an exported file: its markdown (``NAME.md`` beside the weights) and the same card as a
Hugging Face hub README, both written from the card's data (``NAME.json``, made by :mod:`crate.export`)."""

from __future__ import annotations

from typing import Any

from crate.interpret.frozen_features import KNN_TEMPERATURE, knn_k
from crate.models import in_zoo
from crate.noise import accuracy_noise
from crate.run import UNKNOWN_RUN_SETTING
from crate.wording import counted

__all__ = ["UNKNOWN_RUN_SETTING", "card_markdown", "hub_card"]


def _held_out_words(card: dict[str, Any]) -> str:
    """The images the card's figures were read on: the run's validation split or, where the data validates on its
    official test split (CIFAR through torchvision), that split, said so."""
    if card.get("val_split_note"):
        return f"the {card['val_images']} images of the data's official test split, which its run validated on"
    return f"the {card['val_images']} validation images its run held out"


def _frozen_feature_lines(card: dict[str, Any]) -> str:
    """The encoder card's section: k-NN and probe accuracy of the file and of its controls."""
    scored = card.get("frozen_features")
    if not scored:
        return f"not measured ({card['accuracy_note']})"
    rows = "\n".join(
        f"| {label} | {entry['knn_top1']:.4f} | {entry['linear_probe_top1']:.4f} |" for label, entry in scored.items()
    )
    return f"""frozen features scored on {_held_out_words(card)} \
(float32): weighted k-NN (k {knn_k(card["bank_images"])}, temperature {KNN_TEMPERATURE}; the bank: the \
{card["bank_images"]} training images) and a logistic-regression probe on the standardised features, beside its controls

| encoder | k-NN top-1 | linear probe top-1 |
|---|---|---|
{rows}

{_against_controls(card)}
"""


def _against_controls(card: dict[str, Any]) -> str:
    """The file's lead over each control, read against two binomial standard errors of the difference on the
    card's images: a lead a control's figure lies within is not a finding."""
    (_, own), *controls = card["frozen_features"].items()
    images = card["val_images"]
    lines = []
    for label, control in controls:
        parts = []
        for key, name in (("knn_top1", "k-NN"), ("linear_probe_top1", "probe")):
            lead, noise = own[key] - control[key], accuracy_noise(own[key], control[key], images)
            said = "" if lead > noise else ", below it" if lead < -noise else ", not a finding"
            parts.append(f"{name} {100 * lead:+.1f} points (two standard errors: {100 * noise:.1f}){said}")
        lines.append(f"- this file against {label}: {'; '.join(parts)}")
    return "\n".join(lines)


def _settings_words(card: dict[str, Any]) -> str:
    """The build settings the file records beside the model's name, as the architecture line gives them: timm
    builds the file with them wherever the call gives none."""
    settings = card.get("model_settings")
    if not settings:
        return ""
    given = ", ".join(f"{key}={value!r}" for key, value in settings.items())
    return f"; built with `{given}`, which the file records and timm builds it with"


def _trained_line(card: dict[str, Any]) -> str:
    """Full epochs (and the batches of the next, for a file written mid-epoch) and optimizer steps, and the file or
    pretrained tag whose weights they started from (``--model.pretrained_file``); where the file was written before
    the steps its schedule planned, it says so, and whether it is the run's best checkpoint (the learning rate had
    not finished its decay: not the recipe's result)."""
    done, planned = card["global_step"], card.get("planned_steps")
    partial = card.get("batches_into_epoch") or 0
    if partial and not card["epochs"]:
        trained = f"{counted(partial, 'batch', 'batches')} of the first epoch"
    else:
        next_epoch = f" and {counted(partial, 'batch', 'batches')} of the next" if partial else ""
        trained = f"{counted(card['epochs'], 'epoch')}{next_epoch}"
    line = f"{trained}, {counted(done, 'optimizer step')}"
    recipe = card.get("recipe") or {}
    if start := recipe.get("pretrained_file"):
        digest = recipe.get("pretrained_sha256") or ""
        held = f"sha256 `{digest}`, " if len(digest) == 64 else ""
        line += f", starting from the weights of `{start}` ({held}the epochs it took to make them not counted)"
    elif tag := recipe.get("pretrained_tag"):
        line += f", starting from the weights of the tag `{tag}` (the epochs it took to make them not counted)"
    if planned and done < planned:
        why = (
            f"the run's best checkpoint by {best_by}, written before the schedule's end"
            if (best_by := card.get("best_by"))
            else "the run stopped early, e.g. at --trainer.max_time, or went on after this file was written"
        )
        line += (
            f" of the {planned} its learning-rate schedule planned ({why}: its learning rate had not finished decaying)"
        )
    return line


def _class_table(card: dict[str, Any]) -> str:
    """The classes in label order (index and name), or a line saying the file records none."""
    names = card.get("label_names")
    if card["num_classes"] == 0:
        return ""
    if not names:
        return "\n## Classes\n\nThe run recorded no class names: index i is the i-th class of its data.\n"
    rows = "\n".join(f"| {index} | {name} |" for index, name in enumerate(names))
    return f"""
## Classes

Output index and class name (also in the file's metadata and in `model.pretrained_cfg["label_names"]`):

| index | class |
|---|---|
{rows}
"""


def card_markdown(card: dict[str, Any]) -> str:
    recipe = "\n".join(f"| {k} | {v} |" for k, v in card["recipe"].items())
    accuracy = card["val_accuracy"]
    precision = str(card["recipe"].get("precision", "32-true"))
    differs = (
        ""
        if precision.startswith("32")
        else "; `train.py validate` measures in the run's precision, which this card cannot name"
        if precision == UNKNOWN_RUN_SETTING
        else (f"; `train.py validate` measures in the run's precision ({precision}) and can differ in the last digits")
    )
    stored = card.get("dtype", "float32")  # a file of 16-bit weights is measured as timm loads it: widened to float32
    computed = "float32" if stored == "float32" else f"float32, from the weights as stored in {stored}"
    accuracy_line = (
        f"**{accuracy:.4f}** on {_held_out_words(card)} ({computed}{differs})"
        if accuracy is not None
        else f"not measured ({card['accuracy_note']})"
    )
    encoder = card["num_classes"] == 0
    measured = (
        f"- measured on this file at export: {_frozen_feature_lines(card)}"
        if encoder
        else f"- validation accuracy, measured on this file at export: {accuracy_line}"
    )
    if card.get("val_split_note"):
        measured += (
            "\n- no unbiased test figure: the run validated on its data's official test split and chose its "
            f"checkpoints by it ({card['val_split_note']})"
        )
    if card.get("test_accuracy") is not None:
        measured += (
            f"\n- test top-1 (the data's official test split, scored once after this file was chosen on val, "
            f"through timm's evaluation transform): **{card['test_accuracy']:.4f}** on {card['test_images']:,} images"
        )
    baseline = card.get("classical_baseline")
    if baseline:  # only where the run measured it: cards of earlier runs stay as they were
        measured += (
            f"\n- classical baseline on the same split's pixels (measured when the run started, "
            f"{baseline['train_images']:,} training images): RBF SVM {baseline['rbf_svm']:.4f} · logistic regression "
            f"{baseline['logistic']:.4f}"
        )
    classes = f"{card['num_classes']} classes"
    outputs = f"an encoder ({card.get('num_features')} features, no classifier)" if encoder else classes
    return f"""# {card["name"]}

- architecture: `{card["model_name"]}` ({card["parameters"]:,} parameters), input {card["input_size"]}, \
{outputs}{_settings_words(card)}
- data: {card["data"]}
- trained: {_trained_line(card)}
{measured}
- load (after `{"import crate, timm" if in_zoo(card["model_name"]) else "import timm"}`): `{card["load"]}`
- sha256 of `{card["file"]}`: `{card["sha256"]}`
{_class_table(card)}
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


def hub_card(card: dict[str, Any]) -> str:
    """The card as a Hugging Face hub README (its metadata block, then the card)."""
    from huggingface_hub import ModelCard, ModelCardData

    task = "image-feature-extraction" if card.get("num_classes") == 0 else "image-classification"  # an encoder's
    data = ModelCardData(library_name="timm", license="mit", tags=[task, "timm", "crate-zoo"])
    return str(ModelCard(f"---\n{data.to_yaml()}\n---\n\n{card_markdown(card)}"))
