"""Where a command writes, checked before it reads or computes anything: a path that cannot become a folder
(it, or a folder above it, is a file) is refused by name instead of failing with ``FileExistsError`` or
``NotADirectoryError`` after the work was done, and a folder that holds an earlier run's output is left as it
is unless the caller was asked to replace it."""

from __future__ import annotations

from pathlib import Path

__all__ = ["OutputPathError", "check_output_folder"]


class OutputPathError(ValueError):
    """An output path that cannot be written, with the flag that sets it."""


def _blocking_file(folder: Path) -> Path | None:
    """The file that keeps ``folder`` from being created or used as a folder: ``folder`` itself or a folder
    above it that exists and is not a folder; None where there is none."""
    folder = Path(folder)
    return next((path for path in (folder, *folder.parents) if path.exists() and not path.is_dir()), None)


def check_output_folder(
    folder: str | Path, flag: str, what: str, earlier: tuple[str, ...] = (), overwrite: bool = True
) -> None:
    """Refuse ``folder`` (given with ``flag``, to hold ``what``) where a file stands in its place, and, unless
    ``overwrite``, where it already holds one of the files named in ``earlier`` (an earlier run's output)."""
    if (file := _blocking_file(Path(folder))) is not None:
        raise OutputPathError(f"{flag} {folder}: {file} is a file, not a folder; give a folder for {what}")
    if not overwrite and (found := [name for name in earlier if (Path(folder) / name).exists()]):
        raise OutputPathError(
            f"{flag} {folder} already holds {found[0]} of an earlier run, left as it is; pass --overwrite to "
            f"replace {what}, or give another {flag}"
        )
