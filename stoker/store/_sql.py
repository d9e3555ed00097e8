"""Loading the named queries and migrations from the package's ``.sql`` files."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


def _parse(text: str) -> dict[str, str]:
    parts = _NAME.split(text)
    # parts = [preamble, name1, body1, name2, body2, ...]
    out: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = [ln for ln in body.strip().splitlines() if not ln.lstrip().startswith("--")]
        out[name] = "\n".join(lines).strip().rstrip(";")
    return out


@cache
def queries(dialect: str) -> dict[str, str]:
    """The named queries for ``dialect``: the shared file and one file per concept under
    ``queries/`` (a name defined twice is an error), overridden by the dialect's own."""
    root = resources.files("stoker.store") / "sql"
    q = _parse((root / "queries.sql").read_text())
    concepts = root / "queries"
    if concepts.is_dir():
        for entry in sorted(concepts.iterdir(), key=lambda e: e.name):
            if not entry.name.endswith(".sql"):
                continue
            more = _parse(entry.read_text())
            twice = sorted(set(more) & set(q))
            if twice:
                raise ValueError(f"queries/{entry.name} defines {', '.join(twice)} again")
            q.update(more)
    own = root / f"queries.{dialect}.sql"
    if own.is_file():
        q.update(_parse(own.read_text()))
    return q


def migrations() -> list[tuple[int, str]]:
    """Numbered migrations in order: ``[(1, sql), (2, sql), ...]``."""
    root = resources.files("stoker.store") / "sql" / "migrations"
    found = []
    for entry in root.iterdir():
        m = re.match(r"^(\d{4})_\w+\.sql$", entry.name)
        if m:
            found.append((int(m.group(1)), entry.read_text()))
    return sorted(found)


def split_statements(script: str) -> list[str]:
    """Split a migration into statements (no semicolons inside literals in our files)."""
    body = "\n".join(ln for ln in script.splitlines() if not ln.lstrip().startswith("--"))
    return [s.strip() for s in body.split(";") if s.strip()]
