"""Finding the error a user should read inside a chain of wrapped exceptions."""

from __future__ import annotations

import difflib
import inspect
import pydoc
import re
from typing import Any

__all__ = ["DataError", "innermost_refusal", "keys_help", "one_line", "parser_problem"]


class DataError(ValueError):
    """A dataset, split, file or folder that cannot be used, with what to do about it."""


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


def parser_problem(message: str) -> str:
    """jsonargparse's error for a command line or config, as one line that names what was wrong.

    A key under a class chosen by ``class_path`` (``--data.*`` of a LightningCLI in subclass mode) fails as a
    union of that class and ``None``: the message leads with "Does not validate against any of the Union
    subtypes" and lists each subtype's own error below, the one that says what to change ("unrecognized
    arguments: --augmentation.auto_augment=x", "Parser key "batch_size": Expected a <class 'int'>. Got value:
    abc"). The line is the outer key, then each subtype's error that is not the ``None`` alternative, then
    the value given where no error names it. A file setting that names no file is said so, and so is a model
    setting linked from the data. Other messages are joined into one line as they are.
    """
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    linked = re.match(r'(?:argument data\.\w+ --> model\.(\w+):|Linked "model\.(\w+)" must be given via)', message)
    if linked:  # a model setting the CLI takes from the data (jsonargparse's words differ by the setting's type)
        key = linked[1] or linked[2]
        if key == "num_classes":
            return "--model.num_classes is taken from the data (the number of its classes): leave it out"
        return f"--model.{key} is taken from the data: set --data.{key} instead"
    missing = re.fullmatch(r'Parser key "([\w.]+)": File does not exist: \'(.*)\'', " ".join(lines))
    if missing:  # a --config (or other file setting) that names no file
        return f"--{missing[1]} {missing[2]}: no such file; check the path"
    if len(lines) < 2 or lines[1] != "Does not validate against any of the Union subtypes":
        return " ".join(lines)
    errors: list[list[str]] = []
    given = ""
    inside = False
    for line in lines[2:]:
        if line == "Errors:":
            inside = True
        elif line.startswith("Given value:"):
            given = line
        elif line.startswith("Given value type:"):
            inside = False
        elif inside and line.startswith("- "):
            errors.append([line[2:]])
        elif inside and errors:
            errors[-1].append(line)
    kept = [" ".join(error) for error in errors if error != ["Expected a <class 'NoneType'>"]]
    # a class path was given (--trainer.callbacks+=EarlyStopping): its own error says what to change, and the
    # other alternatives ("Not a valid subclass of Callback", the forms a value may take) and the value are noise
    chosen = [error for error in kept if error.startswith("Problem with given class_path")]
    kept = chosen or kept
    named = bool(chosen) or any("Got value" in error or "unrecognized arguments" in error for error in kept)
    shown = given and not named and "NestedArg(" not in given  # a NestedArg repeats the option the line names
    return " ".join([lines[0], "; ".join(kept) or lines[1]] + ([given] if shown else []))


def keys_help(problem: str, program: str, sections: dict[str, Any] | None = None) -> str:
    """The command that lists the keys a :func:`parser_problem` line is about: a class chosen by
    ``class_path`` has its own (``fit --data.help CLASS``, where the class imports), everything else is in
    ``fit --help``. A key that is a typo of one the class takes is named ("did you mean --model.lr?"): the
    class chosen by ``class_path``, or for an unrecognised ``--SECTION.KEY`` the class ``sections`` gives
    SECTION (``{"model": ImageClassifier, "trainer": Trainer}``)."""
    found = re.match(r'Parser key "([\w.]+)": Problem with given class_path \'([\w.]+)\': (.*)', problem)
    located = pydoc.locate(found[2]) if found else None
    if found and located is not None:  # a class that imports (not a misspelt class_path)
        # the typo is a key of the innermost class named (--data.multi_crop.local_crop: of MultiCrop's)
        typo = re.search(r"Option '(\w+)' is not accepted", found[3])
        inner = pydoc.locate(re.findall(r"class_path '([\w.]+)'", problem)[-1])
        section = ".".join(re.findall(r'Parser key "([\w.]+)"', problem))
        return f"python {program} fit --{found[1]}.help {found[2]}" + _close_key(typo, inner, section)
    typo = re.search(r"(?:unrecognized arguments: --|does not accept option ')(\w+)\.(\w+)\b", problem)  # line, config
    section = (sections or {}).get(typo[1]) if typo else None
    return f"python {program} fit --help (or --print_config)" + _close_key(typo, section, typo[1] if typo else "")


def _close_key(typo: re.Match[str] | None, cls: Any, section: str) -> str:
    """ "; did you mean --SECTION.KEY?" for the key of ``cls``'s constructor closest to the one ``typo`` caught."""
    if typo is None or not callable(cls):
        return ""
    try:
        keys = [name for name in inspect.signature(cls).parameters if name not in ("self", "args", "kwargs")]
    except (TypeError, ValueError):  # a class whose signature cannot be read: nothing to suggest
        return ""
    close = difflib.get_close_matches(typo[typo.re.groups], keys, n=1)
    return f"; did you mean --{section}.{close[0]}?" if close else ""
