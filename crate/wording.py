"""How the zoo's messages and cards count things: "1 epoch", "2 epochs"."""

from __future__ import annotations

__all__ = ["counted"]


def counted(number: int, noun: str, plural: str | None = None) -> str:
    """``number`` and ``noun``, in its plural (``noun`` + s unless given) unless ``number`` is 1."""
    return f"{number} {noun if number == 1 else plural or noun + 's'}"
