"""A local driver writes through stoker's Hadoop classes (stoker/runtime/hadoop_local.py): no
``chmod`` or ``readlink`` process for its checkpoint, its RocksDB state or its files sink's
output, the same files with the same modes, every id once.

The processes are counted as Hadoop starts them: by name along ``PATH``, which here begins
with a folder of counting wrappers. The same job with ``STOKER_HADOOP_NIO=0`` (Hadoop's own
classes) shows that the wrappers do count: it starts dozens.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from tests.support.cli_runs import LIGHT, RUN_TIMEOUT, log_tail
from tests.support.core import APPS, stoker_cmd
from tests.support.procs import counting_wrappers

pytestmark = [pytest.mark.timeout(900)]

COUNTED = ("chmod", "readlink", "stat", "ls")


def _run(tmp: Path, name: str, nio: bool) -> tuple[list[str], Path, Path]:
    """Run the app to its end; the commands it forked, its state folder and its output."""
    work = tmp / name
    work.mkdir()
    forks = work / "forks.log"
    forks.touch()
    path = work / "bin"
    assert counting_wrappers(path, forks, COUNTED) == set(COUNTED)
    out, state, log = work / "out", work / "state", work / "run.log"
    env = {
        **os.environ,
        "PATH": f"{path}{os.pathsep}{os.environ['PATH']}",
        "FORKLESS_OUT": str(out),
        "STOKER_HADOOP_NIO": "1" if nio else "0",
    }
    argv = stoker_cmd(
        "run", str(APPS / "forkless_app.py"), *LIGHT, "-D", f"stoker.state_dir={state}"
    )
    with open(log, "wb") as fh:
        done = subprocess.run(
            argv, cwd=work, env=env, stdout=fh, stderr=subprocess.STDOUT, timeout=RUN_TIMEOUT
        )
    assert done.returncode == 0, log_tail(log)
    return forks.read_text().split(), state, out


def _ids(out: Path) -> list[int]:
    ids = []
    for part in out.rglob("part-*.json"):
        ids += [json.loads(line)["id"] for line in part.read_text().splitlines() if line]
    return sorted(ids)


def test_a_local_driver_writes_its_checkpoint_state_and_output_without_forking(
    tmp_path: Path,
) -> None:
    forks, state, out = _run(tmp_path, "nio", nio=True)
    assert forks == [], f"processes Hadoop forked: {sorted(set(forks))} ({len(forks)})"
    assert _ids(out) == list(range(300))
    offsets = [p for p in state.rglob("offsets/*") if p.name.isdigit()]
    assert len(offsets) >= 10  # 10 epochs of data at least, each through the classes
    for p in [*state.rglob("offsets/*"), *state.rglob("commits/*")]:
        # Hadoop's modes as before: the file's own umask-mode (the process's umask).
        mode = stat.S_IMODE(p.stat().st_mode)
        assert mode == 0o666 & ~_umask(), (p, oct(mode))

    hadoops, _, out2 = _run(tmp_path, "hadoop", nio=False)
    assert _ids(out2) == list(range(300))
    assert {"chmod", "readlink"} <= set(hadoops), sorted(set(hadoops))  # the wrappers count


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
