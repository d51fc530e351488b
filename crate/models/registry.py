"""timm's ``register_model`` for the zoo's model functions, remembering which settings their caller gave.

A zoo model function merges its name's own settings (``depth``, ``num_heads``...) into the caller's keyword
arguments before its family's builder sees them, so the builder alone cannot tell ``num_heads=4`` asked for from
``num_heads=4`` the name gives. Loading a file needs that difference: a setting the file records is built from the
file where the caller gave none, and as asked, with a warning, where the caller gave one, whatever its value.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from timm.models import register_model as timm_register_model

__all__ = ["register_model", "settings_given"]

_Model = TypeVar("_Model")
# the keyword arguments the caller of the zoo model function now running gave it; None outside one
_GIVEN: contextvars.ContextVar[frozenset[str] | None] = contextvars.ContextVar("settings_given", default=None)


def register_model(fn: Callable[..., _Model]) -> Callable[..., _Model]:
    """Register ``fn`` with timm (under its own name and module, with its module's ``default_cfgs``), so that while
    it runs :func:`settings_given` knows the keyword arguments its caller passed."""

    @functools.wraps(fn)
    def entrypoint(pretrained: bool = False, **kwargs: Any) -> _Model:
        token = _GIVEN.set(frozenset(kwargs))
        try:
            return fn(pretrained=pretrained, **kwargs)
        finally:
            _GIVEN.reset(token)

    return timm_register_model(entrypoint)


def settings_given(kwargs: Mapping[str, Any]) -> frozenset[str]:
    """The keys of ``kwargs`` the caller gave: inside a zoo model function, those its caller passed (not the name's
    own settings the function merged in); outside one, all of them."""
    given = _GIVEN.get()
    return frozenset(kwargs) if given is None else given & frozenset(kwargs)
