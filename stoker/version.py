"""stoker's version, in a module of its own: the store records it (which stoker applied each
migration, which one each manager runs) and may not import the package root."""

from __future__ import annotations

__version__ = "0.1.0"
