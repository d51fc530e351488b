"""Three messages every run printed that say nothing about it, each dropped by its exact text at the place it
comes from (no other warning or log line is hidden):

- Lightning's advertisement for its cloud logger, logged by its logger connector on every run;
- torch's ``FutureWarning`` that ``isinstance(treespec, LeafSpec)`` is deprecated, which Lightning's own
  ``lightning.pytorch.utilities._pytree`` triggers (not the zoo's code) with recent torch releases;
- "`weights_only` was not set": the zoo saves full training checkpoints on purpose (see
  :class:`crate.lit.fault_tolerance.InterruptCheckpoint`, which passes the setting)."""

from __future__ import annotations

import logging
import warnings

__all__ = ["quiet_known_noise"]

_LOGGED = ("💡 Tip: For seamless cloud logging",)


class _DropExactMessages(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_LOGGED)


_FILTER = _DropExactMessages()


def quiet_known_noise() -> None:
    """Install the filters (idempotent)."""
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
    warnings.filterwarnings(
        "ignore",
        message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
        category=FutureWarning,
        module=r"lightning\.pytorch\.utilities\._pytree",
    )
