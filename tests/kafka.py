"""A throwaway Apache Kafka broker for tests and benchmarks.

:class:`ThrowawayKafka` runs one Kafka 4.x node in KRaft mode (broker and controller in one
JVM) in a fresh temporary folder, on free ports of 127.0.0.1. Its jars come from Maven Central
into the local Maven repository: ``tests/kafka/pom.xml`` sets the version, and
``mvn dependency:build-classpath`` on it writes the broker's classpath to a file beside the
local repository (``~/.m2/stoker/``). ``.ci/run`` runs that once; the fixture runs it only when
the file or one of its jars is missing (first offline, then online), so nothing is fetched when
everything is present.

Unlike :class:`tests.pg.ThrowawayPostgres`, :meth:`~ThrowawayKafka.stop` keeps the folder: the
fault tests kill the broker (``stop(kill=True)`` is SIGKILL) and :meth:`~ThrowawayKafka.start`
it again on the same log and the same ports, so clients reconnect to the same
:attr:`~ThrowawayKafka.bootstrap`. :meth:`~ThrowawayKafka.close` (and leaving the ``with``
block) stops it and removes the folder.

The broker is this process's own child, started with ``java`` directly (no shell, no Kafka
scripts). Topic administration goes through ``confluent-kafka``'s AdminClient (the dev extra).
Every failure to come up raises :class:`KafkaUnavailable` naming why (java or mvn missing, the
resolution's output, the end of the broker's log): tests that need a broker fail, never skip.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path
from types import TracebackType
from typing import Any

from stoker.errors import StokerError
from tests.support import free_port

__all__ = ["KAFKA_POM", "KafkaUnavailable", "ThrowawayKafka", "kafka_classpath", "kafka_version"]

KAFKA_POM = Path(__file__).resolve().parent / "kafka" / "pom.xml"
# Light JVM flags (tests.support.LIGHT_JVM: C1 only, the serial collector) and a small heap: the
# broker shares two cores with Spark's JVMs. Benchmarks pass their own jvm_opts.
DEFAULT_JVM_OPTS = (
    "-Xms64m",
    "-Xmx256m",
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseSerialGC",
    "-Xss1m",
    "-Djava.awt.headless=true",
)
_NODE_ID = 1


class KafkaUnavailable(StokerError):
    """No Kafka jars, java or mvn, or the throwaway broker did not come up."""


# jars ------------------------------------------------------------------------------------------
def kafka_version(pom: Path = KAFKA_POM) -> str:
    """The Kafka version ``tests/kafka/pom.xml`` pins (its ``kafka.version`` property)."""
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    found = ET.parse(pom).getroot().find("m:properties/m:kafka.version", ns)
    if found is None or not (found.text or "").strip():
        raise KafkaUnavailable(f"{pom} sets no kafka.version property")
    return (found.text or "").strip()


def _classpath_file(version: str) -> Path:
    # Where the pom's mdep.outputFile points (${user.home}/.m2/stoker/...).
    return Path.home() / ".m2" / "stoker" / f"kafka_2.13-{version}.classpath"


def _read_classpath(path: Path) -> list[str] | None:
    """The jars listed in ``path`` if the file and every jar exist, else None."""
    try:
        jars = [j for j in path.read_text().strip().split(os.pathsep) if j]
    except OSError:
        return None
    if not jars or not all(os.path.isfile(j) for j in jars):
        return None
    return jars


def kafka_classpath(*, timeout: float = 600.0) -> list[str]:
    """The broker's jars (absolute paths into the local Maven repository), resolved with Maven
    when the classpath file or one of its jars is missing: offline first, then from Maven
    Central. Raises :class:`KafkaUnavailable` with Maven's output when neither works."""
    version = kafka_version()
    target = _classpath_file(version)
    jars = _read_classpath(target)
    if jars is not None:
        return jars
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaUnavailable(
            f"Kafka {version}'s jars are not resolved ({target} is missing or names a missing "
            "jar) and there is no `mvn` on the PATH to resolve them; install Maven (Debian: "
            f"apt-get install maven) or run `mvn -f {KAFKA_POM} dependency:build-classpath`"
        )
    outputs: list[str] = []
    for offline in (True, False):
        argv = [mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(KAFKA_POM)]
        argv += ["-o"] if offline else []
        argv += ["dependency:build-classpath", f"-Dmdep.outputFile={target}"]
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
            )
        except subprocess.TimeoutExpired as e:
            raise KafkaUnavailable(f"{' '.join(argv)} took more than {timeout}s") from e
        jars = _read_classpath(target)
        if done.returncode == 0 and jars is not None:
            return jars
        outputs.append(f"$ {' '.join(argv)} -> exit {done.returncode}\n{done.stdout}{done.stderr}")
    raise KafkaUnavailable(
        f"could not resolve Kafka {version}'s jars with Maven:\n" + "\n".join(outputs)[-4000:]
    )


# the broker ------------------------------------------------------------------------------------
class ThrowawayKafka:
    """One Kafka node (KRaft, broker and controller) in a temporary folder.

    Use as a context manager, or call :meth:`start`, :meth:`stop` (restartable: the folder, its
    log and the ports stay) and :meth:`close` (stopped and removed). :attr:`bootstrap` is
    ``127.0.0.1:<port>``; :meth:`create_topic` and :meth:`add_partitions` administer topics.
    ``settings`` are extra or overriding ``server.properties`` lines (retention for data-loss
    tests, say); topics are never created automatically.
    """

    def __init__(
        self,
        *,
        base_dir: str | Path | None = None,
        start_timeout: float = 120.0,
        settings: dict[str, str] | None = None,
        jvm_opts: tuple[str, ...] | list[str] = DEFAULT_JVM_OPTS,
    ) -> None:
        self._base_dir = base_dir
        self._start_timeout = start_timeout
        self._extra_settings = dict(settings or {})
        self._jvm_opts = list(jvm_opts)
        self.port: int | None = None
        self.controller_port: int | None = None
        self.cluster_id: str | None = None
        self._dir: Path | None = None
        self._jars: list[str] | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self.start_seconds: float | None = None  # how long the last start() took

    # lifecycle -------------------------------------------------------------------------------
    @property
    def folder(self) -> Path | None:
        """The temporary folder (``server.properties``, ``data/``, ``server.log``)."""
        return self._dir

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> ThrowawayKafka:
        """Start the broker and wait until it serves metadata. The first start resolves the
        jars, makes the folder and formats its storage; a start after :meth:`stop` runs on the
        same folder and ports, its log kept."""
        if self.running:
            raise KafkaUnavailable("this ThrowawayKafka is running already")
        began = time.monotonic()
        if self._dir is None:
            # A script that ends without close() (an exception, say) leaves no broker behind.
            atexit.register(self.close)
            self._first_start()
        else:
            self._spawn()
            if not self._wait_ready():
                raise KafkaUnavailable(
                    f"Kafka did not start again on {self._dir} (ports {self.port}, "
                    f"{self.controller_port}):{self._log_tail()}"
                )
        self.start_seconds = time.monotonic() - began
        return self

    def stop(self, kill: bool = False) -> None:
        """Stop the broker: SIGTERM and its controlled shutdown, or SIGKILL when ``kill``. The
        folder stays for :meth:`start`; :meth:`close` removes it."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                proc.wait(timeout=5 if kill else 60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def close(self) -> None:
        """Kill the broker and remove its folder."""
        self.stop(kill=True)
        atexit.unregister(self.close)
        folder, self._dir = self._dir, None
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        self.port = self.controller_port = None

    def __enter__(self) -> ThrowawayKafka:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def bootstrap(self) -> str:
        """``host:port`` of the broker's PLAINTEXT listener (kept across stop and start)."""
        if self.port is None:
            raise KafkaUnavailable("the throwaway Kafka broker has not been started")
        return f"127.0.0.1:{self.port}"

    # topics ----------------------------------------------------------------------------------
    def admin(self, **config: Any) -> Any:
        """A ``confluent_kafka.admin.AdminClient`` on this broker."""
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap, **config})

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        *,
        config: dict[str, str] | None = None,
        timeout: float = 30.0,
    ) -> None:
        """Create topic ``name`` with ``partitions`` partitions (replication factor 1) and wait
        until every partition has a leader."""
        from confluent_kafka.admin import NewTopic

        topic = NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})
        admin = self.admin()  # kept until the result: a dropped client cancels its requests
        futures = admin.create_topics([topic], operation_timeout=timeout)
        futures[name].result(timeout=timeout)
        self._wait_partitions(name, partitions, timeout)

    def add_partitions(self, name: str, n: int, *, timeout: float = 30.0) -> int:
        """Add ``n`` partitions to topic ``name``; returns its new partition count."""
        from confluent_kafka.admin import NewPartitions

        total = self.partitions(name) + n
        admin = self.admin()  # kept until the result: a dropped client cancels its requests
        futures = admin.create_partitions([NewPartitions(name, total)], operation_timeout=timeout)
        futures[name].result(timeout=timeout)
        self._wait_partitions(name, total, timeout)
        return total

    def partitions(self, name: str, *, timeout: float = 10.0) -> int:
        """How many partitions topic ``name`` has (KafkaUnavailable if it does not exist)."""
        meta = self.admin().list_topics(topic=name, timeout=timeout).topics.get(name)
        if meta is None or meta.error is not None:
            raise KafkaUnavailable(f"topic {name!r}: {getattr(meta, 'error', 'not found')}")
        return len(meta.partitions)

    def _wait_partitions(self, name: str, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        admin = self.admin()
        while True:
            meta = admin.list_topics(topic=name, timeout=timeout).topics.get(name)
            if (
                meta is not None
                and meta.error is None
                and len(meta.partitions) >= count
                and all(p.leader >= 0 for p in meta.partitions.values())
            ):
                return
            if time.monotonic() > deadline:
                raise KafkaUnavailable(f"topic {name!r} has no {count} led partitions: {meta}")
            time.sleep(0.05)

    # internals -------------------------------------------------------------------------------
    def _first_start(self) -> None:
        java = shutil.which("java")
        if java is None:
            raise KafkaUnavailable("no `java` on the PATH (Kafka 4.x needs Java 17 or later)")
        self._jars = kafka_classpath()
        base = str(self._base_dir) if self._base_dir is not None else tempfile.gettempdir()
        self._dir = Path(tempfile.mkdtemp(prefix="stoker-kafka-", dir=base))
        self.cluster_id = _cluster_id()
        (self._dir / "log4j2.properties").write_text(_LOG4J2)
        # A free port can be taken by someone else before the broker binds it: try a few.
        for attempt in range(3):
            self.port, self.controller_port = _two_free_ports()
            self._write_properties()
            if attempt == 0:
                self._format()
            self._spawn()
            if self._wait_ready():
                return
            if "Address already in use" not in self._log_tail():
                break
        raise KafkaUnavailable(f"Kafka did not start in {self._dir}:{self._log_tail()}")

    def _properties(self) -> dict[str, str]:
        assert self._dir is not None
        return {
            "process.roles": "broker,controller",
            "node.id": str(_NODE_ID),
            "controller.quorum.voters": f"{_NODE_ID}@127.0.0.1:{self.controller_port}",
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}"
            ),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self._dir / "data"),
            "auto.create.topics.enable": "false",
            "num.partitions": "1",
            "default.replication.factor": "1",
            "min.insync.replicas": "1",
            # The internal topics: one replica, and few partitions (50 each by default, which a
            # two-core machine takes seconds to create on first use).
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            # A broker killed and started again waits out its old registration's session (9 s by
            # default) before it is unfenced: keep that short.
            "broker.session.timeout.ms": "2000",
            "broker.heartbeat.interval.ms": "500",
            "num.network.threads": "2",
            "num.io.threads": "2",
            "num.recovery.threads.per.data.dir": "1",
            "background.threads": "2",
            **self._extra_settings,
        }

    def _write_properties(self) -> None:
        assert self._dir is not None
        lines = [f"{k}={v}" for k, v in self._properties().items()]
        (self._dir / "server.properties").write_text(
            "# stoker ThrowawayKafka\n" + "\n".join(lines) + "\n"
        )

    def _java(self, main: str, *args: str) -> list[str]:
        assert self._dir is not None and self._jars is not None
        java = shutil.which("java") or "java"
        return [
            java,
            *self._jvm_opts,
            f"-Dlog4j2.configurationFile={self._dir / 'log4j2.properties'}",
            "-cp",
            os.pathsep.join(self._jars),
            main,
            *args,
        ]

    def _format(self) -> None:
        assert self._dir is not None and self.cluster_id is not None
        argv = self._java(
            "kafka.tools.StorageTool",
            "format",
            # One argument: an id that starts with '-' (base64url) is not taken for an option.
            f"--cluster-id={self.cluster_id}",
            "-c",
            str(self._dir / "server.properties"),
        )
        done = subprocess.run(
            argv,
            cwd=self._dir,
            capture_output=True,
            text=True,
            timeout=self._start_timeout,
            stdin=subprocess.DEVNULL,
        )
        if done.returncode != 0:
            raise KafkaUnavailable(
                f"kafka-storage format failed with exit code {done.returncode}:\n"
                f"{done.stdout}{done.stderr}"
            )

    def _spawn(self) -> None:
        assert self._dir is not None
        argv = self._java("kafka.Kafka", str(self._dir / "server.properties"))
        with (self._dir / "server.log").open("ab") as log:
            self._proc = subprocess.Popen(
                argv,
                cwd=self._dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C meant for pytest is not meant for it
            )

    def _wait_ready(self) -> bool:
        """True once the broker serves metadata naming itself; False if it exited first."""
        assert self._proc is not None and self.port is not None
        deadline = time.monotonic() + self._start_timeout
        admin = None
        while True:
            if self._proc.poll() is not None:
                self._proc = None
                return False
            if time.monotonic() > deadline:
                self.stop(kill=True)
                raise KafkaUnavailable(
                    f"Kafka did not serve metadata on {self.bootstrap} within "
                    f"{self._start_timeout}s:{self._log_tail()}"
                )
            # A TCP probe first: librdkafka would log every refused connection to stderr.
            if _accepts(self.port):
                if admin is None:
                    admin = self.admin(**{"log_level": 2})
                with contextlib.suppress(Exception):
                    if _NODE_ID in admin.list_topics(timeout=2).brokers:
                        return True
            time.sleep(0.1)

    def _log_tail(self) -> str:
        if self._dir is None:
            return ""
        try:
            text = (self._dir / "server.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n--- server.log (end) ---\n" + "\n".join(text.splitlines()[-30:])


def _cluster_id() -> str:
    # What `kafka-storage random-uuid` prints: 16 random bytes, base64url without padding.
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _two_free_ports() -> tuple[int, int]:
    while True:
        a, b = free_port(), free_port()
        if a != b:
            return a, b


def _accepts(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


# The broker's log: warnings and errors, and the lines that say it started and stopped.
_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.out.ref = out
logger.raft.name = kafka.server.KafkaRaftServer
logger.raft.level = info
logger.broker.name = kafka.server.BrokerServer
logger.broker.level = info
"""
