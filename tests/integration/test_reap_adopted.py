"""Issue 23 item 10: a process that the kernel hands to stoker's manager (it is PID 1 in a
container, or a child subreaper) is collected, not left ``<defunct>``; a child the manager
started itself is left to its own ``Popen`` (its exit code is judged).

Real processes: this test's process becomes a child subreaper for the test's length, a child
in a session of its own starts a grandchild in its group and exits, and the grandchild exits
once adopted.
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
from collections.abc import Iterator

import pytest

from stoker.procs import reap_adopted, stat
from tests.support import wait_for

PR_SET_CHILD_SUBREAPER = 36

# The child: a grandchild in the child's own group, which outlives it by a moment.
CHILD = """\
import subprocess, sys
g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])
print(g.pid, flush=True)
"""


@pytest.fixture
def subreaper() -> Iterator[None]:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        pytest.skip("prctl(PR_SET_CHILD_SUBREAPER) is not allowed here")
    try:
        yield
    finally:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def test_an_adopted_zombie_is_collected_and_our_own_child_is_not(subreaper: None) -> None:
    child = subprocess.run(
        [sys.executable, "-c", CHILD],
        capture_output=True,
        text=True,
        timeout=60,
        start_new_session=True,  # as the manager starts a driver: a group of its own
    )
    grandchild = int(child.stdout.split()[0])
    # Ours now, and once it exits a zombie nobody else collects.
    wait_for(
        "the adopted grandchild to exit",
        lambda: (s := stat(grandchild)) is not None and s.state == "Z",
        60,
        every=0.1,
    )
    # A child we started ourselves, exited but not yet waited for: not to be touched.
    own = subprocess.Popen([sys.executable, "-c", "raise SystemExit(7)"], start_new_session=True)
    wait_for("our own child to exit", lambda: (s := stat(own.pid)) and s.state == "Z", 60, 0.1)

    assert reap_adopted() == [grandchild]
    assert stat(grandchild) is None
    assert own.wait(timeout=10) == 7  # its exit code was left for its Popen
    assert reap_adopted() == []
