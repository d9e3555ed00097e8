"""``python -m stoker.cli``: the ``stoker`` command."""

from stoker.cli import main

main()
