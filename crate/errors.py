"""Finding the error a user should read inside a chain of wrapped exceptions."""

from __future__ import annotations

__all__ = ["innermost_refusal", "one_line"]


def innermost_refusal(
    err: BaseException,
    kinds: tuple[type[BaseException], ...] = (ValueError, OSError),
    final: tuple[type[BaseException], ...] = (),
) -> BaseException:
    """The innermost exception of one of ``kinds`` in ``err``'s chain (``raise ... from`` or raised while
    handling another), ``err`` itself when there is none; the chain is not followed past an exception of
    one of ``final`` (an error written for the user, such as the zoo's ``CheckpointError``, whose cause is
    the low-level error it explains: "[Errno 22] Invalid argument" of a truncated file).

    jsonargparse wraps a constructor's ``ValueError`` (a setting it refuses) in its own union errors, and a
    constructor may itself have wrapped what it caught (timm's ``AssertionError``); the constructor's own
    message is the one that says what to change.
    """
    chain = [err]
    while not isinstance(chain[-1], final) and (inner := chain[-1].__cause__ or chain[-1].__context__) is not None:
        chain.append(inner)
    return next((e for e in reversed(chain) if isinstance(e, kinds)), err)


def one_line(err: BaseException) -> str:
    """The message of an error as one line. An error raised in a DataLoader worker reaches the main process
    as the same class with the worker's whole traceback as its message ("Caught DataError in DataLoader
    worker process 0. Original Traceback ..."): its last line holds the original message, which is kept."""
    message = str(err).strip()
    if "Original Traceback" in message:
        last = message.splitlines()[-1]
        prefix = f"{type(err).__module__}.{type(err).__qualname__}: "
        message = last[len(prefix) :] if last.startswith(prefix) else last.partition(": ")[2] or last
    return " ".join(line.strip() for line in message.splitlines() if line.strip())
