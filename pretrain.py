"""Masked pretraining of CRATE-MAE: ``python pretrain.py fit --config configs/crate_mae_nano_digits.yaml``."""

from crate.lit import MaskedAutoencoder, cli_main

if __name__ == "__main__":
    cli_main(model_class=MaskedAutoencoder)
