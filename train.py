"""Train and evaluate zoo models: ``python train.py fit --config configs/crate_nano_digits.yaml``."""

from crate.lit import cli_main

if __name__ == "__main__":
    cli_main()
