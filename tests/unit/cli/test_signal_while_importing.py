"""SIGTERM while the app is imported: ``stoker run`` exits 13 (suspended, run it again), also
when the signal lands in code Python runs from a string. CI, chaos seed 9002: such a driver
exited -2 (CPython ends a ``python -m`` process by SIGINT after a KeyboardInterrupt left an
``exec``, whatever exit code it asked for), which no fault explains. No Spark: the app is
still being imported when the signal comes."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from tests.support import REPO, stoker_cmd, wait_for

# Dataclasses and namedtuples run ``exec`` while a module is imported; here the import waits
# inside one until the signal comes.
APP = """\
from pathlib import Path
Path({ready!r}).write_text("importing")
exec("import time\\nwhile True:\\n    time.sleep(0.02)")
"""


def test_sigterm_inside_an_exec_while_importing_exits_13(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    app = tmp_path / "app.py"
    app.write_text(APP.format(ready=str(ready)))
    proc = subprocess.Popen(
        stoker_cmd("run", str(app), "-D", f"stoker.state_dir={tmp_path / 'state'}"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=str(REPO),
    )
    try:
        wait_for("the app importing", lambda: ready.exists() or proc.poll() is not None, 60, 0.05)
        assert proc.poll() is None, proc.communicate()[0].decode()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = out.decode(errors="replace")
    assert proc.returncode == 13, f"rc {proc.returncode}: {text[-2000:]}"
    assert "stopped by a signal while starting" in text, text[-2000:]
    # A graceful stop is not an error (issue 41 item 6): a plain line, no "stoker: error:".
    assert "stoker: stopped by a signal while starting" in text, text[-2000:]
    assert "error" not in text, text[-2000:]
