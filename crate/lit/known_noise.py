"""Messages runs printed that say nothing about them, each dropped by its exact text at the place it comes from
(no other warning or log line is hidden):

- Lightning's advertisement for its cloud logger, logged by its logger connector on every run;
- torch's ``FutureWarning`` that ``isinstance(treespec, LeafSpec)`` is deprecated, which Lightning's own
  ``lightning.pytorch.utilities._pytree`` triggers (not the zoo's code) with recent torch releases;
- "`weights_only` was not set": the zoo saves full training checkpoints on purpose (see
  :class:`crate.lit.fault_tolerance.InterruptCheckpoint`, which passes the setting);
- Lightning's "number of training batches is smaller than the logging interval" on small folders: the epoch's
  mean loss (``train/loss_epoch``) is logged whatever the interval;
- Lightning's "Checkpoint directory ... exists and is not empty" when a run resumes into its own folder (a new
  run always gets a new ``version_N`` folder);
- timm's "Cosine annealing scheduler will have no effect" for a one-epoch schedule (the warm-up still applies);
- Lightning's "LightningCLI's args parameter is intended to run from within Python": ``pretrain.py`` gives the CLI
  its command line less its own ``--objective``, which stays in ``sys.argv`` for the processes a DDP run starts
  with that command line.

Lightning's "The dirpath has changed" stays: it says that a run whose recorded checkpoint files are not in its
folder forgets its best score (:class:`crate.lit.checkpoint_folder.SameFolderCheckpoints` keeps it where they are)."""

from __future__ import annotations

import logging
import warnings

__all__ = ["quiet_known_noise"]

_LOGGED = ("💡 Tip: For seamless cloud logging", "Cosine annealing scheduler will have no effect")
_WARNED = (
    r"The number of training batches \(\d+\) is smaller than the logging interval",
    r"Checkpoint directory .* exists and is not empty",
    r"LightningCLI's args parameter is intended to run from within Python",
)


class _DropExactMessages(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_LOGGED)


_FILTER = _DropExactMessages()


def quiet_known_noise() -> None:
    """Install the filters (idempotent)."""
    for name in ("lightning.pytorch.utilities.rank_zero", "timm.scheduler.cosine_lr"):
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
    for message in _WARNED:
        warnings.filterwarnings("ignore", message=message)
    warnings.filterwarnings(
        "ignore",
        message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
        category=FutureWarning,
        module=r"lightning\.pytorch\.utilities\._pytree",
    )
