"""A program whose ``main`` raises before it starts any job (tests/e2e/test_driver_mode.py):
every application attempt fails the same way, until the restart strategy gives up. The
arguments go into the error text, so the test can find it in the application's view."""

from __future__ import annotations

import sys


def main() -> None:
    raise RuntimeError(f"main gives up at once ({' '.join(sys.argv[1:])})")
