"""Finding the error a user should read inside a chain of wrapped exceptions."""

from __future__ import annotations

__all__ = ["innermost_refusal"]


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
