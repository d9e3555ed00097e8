"""A local job's driver keeps to its user and its host (issue 39 item 9). One real
``stoker server`` (umask 077) and one real Spark job on ``local`` with a files sink and the
Spark UI on: once it has committed epochs,

- every file and folder it wrote (its checkpoint, the sink's output) has no group or other
  bits: Hadoop, which writes the checkpoint, used its own umask (022) before;
- every TCP socket its JVM listens on is on loopback: Spark's RPC, block manager and UI
  listened on the host's address before, without ``spark.authenticate``.
"""

from __future__ import annotations

import os
import socket
import stat
import struct
from pathlib import Path

import pytest

from tests.support import JVM_OPTS, wait_for
from tests.support.manager import one_manager

pytestmark = [pytest.mark.timeout(900)]

JOB = "private"
JOB_TIMEOUT = 420.0  # a cold Spark driver on 2 cores that other suites share
APP = """\
from stoker import Pipeline, sinks, sources

p = Pipeline("private")
p.source(sources.generator(rows_per_second=20))
p.sink(sinks.files({out!r}, format="json"))
"""


def _listening(pid: int) -> list[str]:
    """``host:port`` of every TCP socket ``pid`` listens on (IPv4 and IPv6), from /proc."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    out: list[str] = []
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] != "0A" or f[9] not in inodes:  # 0A: LISTEN
                continue
            addr_hex, port_hex = f[1].split(":")
            raw = bytes.fromhex(addr_hex)
            # /proc writes each 32-bit word of the address in the host's byte order.
            words = struct.unpack(f"<{len(raw) // 4}I", raw)
            host = socket.inet_ntop(family, struct.pack(f">{len(words)}I", *words))
            out.append(f"{host}:{int(port_hex, 16)}")
    return out


def _loopback(hostport: str) -> bool:
    host = hostport.rsplit(":", 1)[0]
    return host.startswith("127.") or host in ("::1", "::ffff:127.0.0.1")


def test_a_local_drivers_files_are_private_and_its_spark_listens_on_loopback(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    (tmp_path / "apps").mkdir()
    app = tmp_path / "apps" / "private_app.py"
    app.write_text(APP.format(out=str(out)))
    conf = {
        "stoker.master": "local[1]",
        "stoker.trigger": "500ms",
        "spark.driver.extraJavaOptions": JVM_OPTS,
        "spark.ui.enabled": "true",
        "spark.ui.port": "0",
    }
    with one_manager(tmp_path, "m") as m:
        r = m.http.post("/v1/jobs", json={"job_id": JOB, "entrypoint": str(app), "conf": conf})
        assert r.status_code == 201, r.text
        wait_for(
            lambda: f"2 epochs committed; manager log:\n{m.log_tail()}",
            lambda: len(m.http.get(f"/v1/jobs/{JOB}/epochs").json()) >= 2,
            JOB_TIMEOUT,
        )
        jvms = [p for p in m.driver_procs() if p.argv and p.argv[0].endswith("/java")]
        assert jvms, m.driver_procs()
        listening = [a for p in jvms for a in _listening(p.pid)]
        assert listening, "the driver's JVM listens on nothing?"
        assert all(_loopback(a) for a in listening), listening
        folder = tmp_path / "state" / "jobs" / JOB
        written = [p for root in (folder, out) for p in root.rglob("*")]
        assert any(p.is_file() and "commits" in p.parts for p in written), written[:20]
        assert any(p.is_file() and p.suffix == ".json" for p in written if out in p.parents)
        public = [
            f"{p} {stat.S_IMODE(p.lstat().st_mode):04o}"
            for p in written
            if not p.is_symlink() and stat.S_IMODE(p.lstat().st_mode) & 0o077
        ]
        assert public == [], public[:20]
        m.http.post(f"/v1/jobs/{JOB}/cancel")
