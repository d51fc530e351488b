"""The package's rooms and the imports between them, read from the code: each room (a subpackage of ``crate`` or
a top-level module) on the floor above everything it imports, and each arrow with how many import statements
make it. ``scripts/docs_tables.py`` writes it into CONTRIBUTING.md (``table:architecture``).

    .venv/bin/python scripts/architecture.py      # print the picture
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "crate"

__all__ = ["imports_between_rooms", "picture"]


def _room(module: str) -> str | None:
    """``crate.lit.data.folder`` -> ``lit``; ``crate.export`` -> ``export``; outside the package: None."""
    parts = module.split(".")
    return parts[1] if parts[0] == "crate" and len(parts) > 1 else None


def _module_of(path: Path) -> str:
    relative = path.relative_to(REPO).with_suffix("")
    parts = list(relative.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_between_rooms() -> Counter[tuple[str, str]]:
    """(importing room, imported room) -> number of import statements, over every module of the package."""
    arrows: Counter[tuple[str, str]] = Counter()
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_of(path)
        source = _room(module)
        if source is None:
            continue
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")
                if node.level:
                    base = base[: len(base) - node.level + 1]
                    targets = [".".join([*base, node.module] if node.module else base)]
                else:
                    targets = [node.module or ""]
            for target in targets:
                room = _room(target)
                if room is not None and room != source:
                    arrows[(source, room)] += 1
    return arrows


def _floors(rooms: set[str], arrows: Counter[tuple[str, str]]) -> dict[str, int]:
    """Floor 1: rooms importing no other room; each other room one floor above the highest room it imports."""
    floors: dict[str, int] = {}

    def floor(room: str, seen: tuple[str, ...] = ()) -> int:
        if room in seen:
            raise SystemExit(f"architecture.py: an import circle: {' -> '.join([*seen, room])}")
        if room not in floors:
            below = [target for source, target in arrows if source == room]
            floors[room] = 1 + max((floor(t, (*seen, room)) for t in below), default=0)
        return floors[room]

    for room in sorted(rooms):
        floor(room)
    return floors


def picture() -> str:
    """The rooms floor by floor, top first, each with what it imports (and how many import statements)."""
    arrows = imports_between_rooms()
    rooms = {path.stem if path.is_file() else path.name for path in PACKAGE.iterdir()}
    rooms = {room for room in rooms if not room.startswith(("_", ".")) and room != "checkpoints"}
    floors = _floors(rooms, arrows)
    lines = ["| floor | room | imports |", "|---|---|---|"]
    for room in sorted(rooms, key=lambda r: (-floors[r], r)):
        uses = ", ".join(f"{t} ({n})" for (s, t), n in sorted(arrows.items()) if s == room) or "-"
        lines.append(f"| {floors[room]} | `{room}` | {uses} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(picture())
