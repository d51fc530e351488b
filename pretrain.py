"""Pretraining without labels, by objective:

python pretrain.py fit --config configs/crate_mae_nano_digits.yaml                        # masked autoencoder
python pretrain.py --objective simdino fit --config configs/simdino/crate_nano_cifar10.yaml  # SimDINO
"""

import inspect
import sys
from pathlib import Path

import yaml

from crate.lit import MaskedAutoencoder, SelfDistillation, cli_main

OBJECTIVES = {"mae": MaskedAutoencoder, "simdino": SelfDistillation}


def objective_and_rest(argv: list[str]) -> tuple[str, list[str]]:
    """``--objective NAME`` (or ``--objective=NAME``), before the subcommand or after it, and the arguments for
    the CLI."""
    at = next((i for i, arg in enumerate(argv) if arg == "--objective" or arg.startswith("--objective=")), None)
    if at is None:
        _refuse_another_objective_s_config(argv)
        return "mae", argv
    if argv[at] == "--objective":
        if at + 1 == len(argv):
            sys.stderr.write(f"pretrain.py: error: --objective takes a name: one of {sorted(OBJECTIVES)}\n")
            raise SystemExit(2)
        name, rest = argv[at + 1], argv[:at] + argv[at + 2 :]
    else:
        name, rest = argv[at].split("=", 1)[1], argv[:at] + argv[at + 1 :]
    if name not in OBJECTIVES:
        sys.stderr.write(f"pretrain.py: error: unknown objective {name!r}; choose one of {sorted(OBJECTIVES)}\n")
        raise SystemExit(2)
    return name, rest


def _model_keys(config: str) -> set[str]:
    """The keys of a YAML config's ``model`` section (none where the file cannot be read: the CLI says why)."""
    try:
        model = (yaml.safe_load(Path(config).read_text()) or {}).get("model")
    except (OSError, yaml.YAMLError, AttributeError):
        return set()
    return set(model) if isinstance(model, dict) else set()


def _refuse_another_objective_s_config(argv: list[str]) -> None:
    """Without ``--objective`` (masked autoencoding), a ``--config`` whose model settings only another objective
    takes (a SimDINO config) is refused with the flag it needs, instead of the CLI's "does not accept option"."""
    configs = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--config"]
    configs += [arg.split("=", 1)[1] for arg in argv if arg.startswith("--config=")]
    keys = set().union(*map(_model_keys, configs)) if configs else set()
    accepted = {name: set(inspect.signature(cls).parameters) for name, cls in OBJECTIVES.items()}
    if not keys or keys <= accepted["mae"]:
        return
    fitting = [name for name, names in accepted.items() if keys <= names]
    if fitting:
        foreign = ", ".join(sorted(keys - accepted["mae"]))
        sys.stderr.write(
            f"pretrain.py: error: the config's model settings ({foreign}) are those of the {fitting[0]} objective: "
            f"add --objective {fitting[0]} (the default is mae, masked autoencoding)\n"
        )
        raise SystemExit(2)


if __name__ == "__main__":
    objective, rest = objective_and_rest(sys.argv[1:])
    sys.argv[1:] = rest  # the CLI reads the rest from the command line, as train.py's does
    cli_main(model_class=OBJECTIVES[objective])
