"""``python -m stoker.cli``: the ``stoker`` command."""

from stoker.cli import main
from stoker.procs import forget_interrupt

try:
    main()
finally:
    forget_interrupt()  # a signal handled by the command: exit with its code, not by SIGINT
