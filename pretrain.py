"""Pretraining without labels, by objective:

python pretrain.py fit --config configs/crate_mae_nano_digits.yaml                        # masked autoencoder
python pretrain.py --objective simdino fit --config configs/simdino/crate_nano_cifar10.yaml  # SimDINO
"""

import sys

from crate.lit import MaskedAutoencoder, SelfDistillation, cli_main

OBJECTIVES = {"mae": MaskedAutoencoder, "simdino": SelfDistillation}


def objective_and_rest(argv: list[str]) -> tuple[str, list[str]]:
    """``--objective NAME`` (or ``--objective=NAME``), before the subcommand or after it, and the arguments for
    the CLI."""
    at = next((i for i, arg in enumerate(argv) if arg == "--objective" or arg.startswith("--objective=")), None)
    if at is None:
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


if __name__ == "__main__":
    objective, rest = objective_and_rest(sys.argv[1:])
    # sys.argv keeps --objective: a DDP run starts its other processes with this command line again
    cli_main(rest, model_class=OBJECTIVES[objective])
