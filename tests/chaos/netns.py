"""Hosts in network namespaces for the chaos harness: a network the nemesis can cut.

:class:`Hosts` makes, per run, a bridge in the root namespace and a namespace per host, each
joined to the bridge by a veth pair and given an address of one /24:

- ``mgr``: the driver (``stoker run``) and everything it starts (its JVM, its Python workers),
  or under two job managers the first manager and every driver it starts;
- ``data``: the PostgreSQL server of the store and the sinks (:class:`NetnsPostgres`);
- ``mgr2``: the second job manager and the drivers it starts (unused under ``stoker run``).

The partitions cut ``mgr`` from ``data``: one manager and its drivers lose the store and the
sinks while the other keeps them, so the other may take over the job while the cut-off
driver still runs (the case a fence must hold).

The runner itself stays in the root namespace, on the bridge's address, as Jepsen's control
node does: it reads the store and the sinks whatever the partition, so a partition never
blinds the checker or the runner's "stuck" clock. The job managers listen on their host's
address, with a token (a manager refuses ``--insecure-no-token`` off loopback). A host for a
standalone Spark worker is not made yet: cluster workloads are not drawn with hosts (the
runner's cluster lives on loopback addresses).

A partition is what TCP sees as one: packets silently dropped on a host's veth as they
leave, so that a connect or a send waits and times out, never fails at once as a refused
connection or a ``blackhole`` route would. ``a -> b`` drops what ``a`` sends to ``b``; both
ways drops both. The drop is a classic BPF filter in direct-action mode on a ``clsact``
qdisc (``tc filter ... egress bpf da bytecode``: "IPv4 to this address: TC_ACT_SHOT"), not
the usual ``prio`` qdisc and ``u32 ... action drop``: those need the kernel's sch_prio and
act_gact, which kernels built small leave out (this machine's among them: no sch_prio, no
act_gact, no netem), while clsact (NET_SCH_INGRESS) and cls_bpf are built in. Nothing but
iproute2's ``ip`` and ``tc`` and util-linux's ``nsenter`` is needed (root only), no nft or
iptables.

Namespaces, bridges and veths outlive the process that made them: their names carry a per-run
prefix (``sk`` and the pid: interface names have at most 15 characters), :meth:`Hosts.close`
deletes them in a ``finally``, and :func:`leftovers` finds any a crash left behind.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from tests.chaos.nemesis import BouncingPostgres

HOSTS = ("mgr", "data", "mgr2")
PREFIX = "sk"  # every namespace and interface of the harness starts with it
NETNS_DIR = Path("/run/netns")


class NetnsUnavailable(RuntimeError):
    """Network namespaces cannot be made here (not root, no iproute2, no nsenter)."""


def why_unavailable() -> str | None:
    """Why :class:`Hosts` cannot work on this machine, or None when it can."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add, tc)"
    missing = [t for t in ("ip", "tc", "nsenter") if shutil.which(t) is None]
    if missing:
        return f"missing {', '.join(missing)} (Debian: apt-get install iproute2 util-linux)"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise NetnsUnavailable(f"ip {' '.join(args)}: exit {done.returncode}: {done.stderr}")
    return done


@dataclass(frozen=True)
class Cut:
    """Packets from ``src`` to ``dst`` dropped (one direction of a partition)."""

    src: str
    dst: str


class Hosts:
    """A bridge and a namespace per host of :data:`HOSTS`; a context manager.

    ``tag`` makes the names unique per run (default: this process's pid); the subnet is
    10.77.<n>.0/24 with ``n`` from the tag, the bridge on .1 and the hosts on .2, .3, ..."""

    def __init__(self, tag: int | None = None, hosts: tuple[str, ...] = HOSTS) -> None:
        tag = os.getpid() if tag is None else tag
        self.prefix = f"{PREFIX}{tag % 100_000}"  # 'sk' + 5 digits + 'br' = 9 characters
        self.hosts = hosts
        self.subnet = f"10.77.{tag % 250 + 1}"
        self.bridge = f"{self.prefix}br"
        self.cuts: set[Cut] = set()
        # The heal timer's thread and the runner both change the cuts.
        self._lock = threading.RLock()
        self._timer: threading.Timer | None = None
        self._heal_at = 0.0  # monotonic: when the timer heals
        self._made: list[tuple[str, str]] = []  # ("netns" | "link", name), in order made

    # names and addresses ----------------------------------------------------------------------
    def netns(self, host: str) -> str:
        return f"{self.prefix}-{host}"

    def addr(self, host: str) -> str:
        """The host's address (``root``: the bridge's, where the runner is)."""
        if host == "root":
            return f"{self.subnet}.1"
        return f"{self.subnet}.{self.hosts.index(host) + 2}"

    def _veth(self, host: str, inside: bool) -> str:
        # e.g. sk12345h01: the host's index, then 0 for the bridge's end, 1 for the host's
        return f"{self.prefix}h{self.hosts.index(host)}{1 if inside else 0}"

    def prefix_argv(self, host: str) -> list[str]:
        """What to put before an argv to run it in ``host``'s namespace. nsenter execs the
        command (its pid is the process's), unlike ``ip netns exec`` it remounts nothing."""
        return ["nsenter", f"--net={NETNS_DIR / self.netns(host)}", "--"]

    def run_in(
        self, host: str, argv: list[str], timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        """``argv`` run to its end in ``host``'s namespace."""
        return subprocess.run(
            self.prefix_argv(host) + argv, capture_output=True, text=True, timeout=timeout
        )

    # making and deleting ----------------------------------------------------------------------
    def __enter__(self) -> Hosts:
        return self.open()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def open(self) -> Hosts:
        why = why_unavailable()
        if why is not None:
            raise NetnsUnavailable(why)
        try:
            self.close()  # what a run of the same pid left (a reused pid after a crash)
            _ip("link", "add", self.bridge, "type", "bridge")
            self._made.append(("link", self.bridge))
            _ip("addr", "add", f"{self.addr('root')}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for host in self.hosts:
                self._add_host(host)
        except BaseException:
            self.close()
            raise
        return self

    def _add_host(self, host: str) -> None:
        ns, outer, inner = self.netns(host), self._veth(host, False), self._veth(host, True)
        _ip("netns", "add", ns)
        self._made.append(("netns", ns))
        _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
        self._made.append(("link", outer))  # deleting one end deletes the pair
        _ip("link", "set", outer, "master", self.bridge)
        _ip("link", "set", outer, "up")
        _ip("link", "set", inner, "netns", ns)
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", ns, "addr", "add", f"{self.addr(host)}/24", "dev", inner)
        _ip("-n", ns, "link", "set", inner, "up")
        # A clsact qdisc on the host's side, so that partition() can hang drop filters on it.
        self._tc(host, "qdisc", "add", "dev", inner, "clsact")

    def close(self) -> None:
        """Delete every namespace and interface of this prefix (the pairs go with their
        namespace or their root end). Safe to call twice, and on a half-made topology."""
        with self._lock:
            self._cancel_timer()
            self.cuts.clear()
        for kind, name in leftovers(self.prefix):
            if kind == "netns":
                _ip("netns", "del", name, check=False)
            else:
                _ip("link", "del", name, check=False)
        self._made.clear()
        left = leftovers(self.prefix)
        if left:
            raise NetnsUnavailable(f"could not delete {left}")

    # partitions -------------------------------------------------------------------------------
    def _tc(self, host: str, *args: str) -> None:
        done = subprocess.run(
            [*self.prefix_argv(host), "tc", *args],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if done.returncode != 0:
            raise NetnsUnavailable(f"tc {' '.join(args)} in {host}: {done.stderr}")

    def cut(self, src: str, dst: str) -> None:
        """Drop, silently, every IP packet ``src`` sends to ``dst``."""
        if src not in self.hosts or dst not in self.hosts or src == dst:
            raise ValueError(f"cut {src} -> {dst}: hosts are {', '.join(self.hosts)}")
        if Cut(src, dst) in self.cuts:
            return
        self._tc(
            src,
            "filter", "add", "dev", self._veth(src, True), "egress", "protocol", "ip",
            "prio", "1", "bpf", "da", "bytecode", _drop_to(self.addr(dst)),
        )  # fmt: skip
        self.cuts.add(Cut(src, dst))

    def partition(self, a: str, b: str, one_way: bool = False) -> str:
        """Cut ``a`` -> ``b`` (and ``b`` -> ``a`` unless ``one_way``): what it did, in words."""
        with self._lock:
            self.cut(a, b)
            if not one_way:
                self.cut(b, a)
        return f"partition {a} {'->' if one_way else '<->'} {b}"

    def partition_for(self, way: str, seconds: float) -> str:
        """The nemesis's ``partition``: cut ``way`` ("a<->b", or "a->b" one way) now, and
        heal every cut ``seconds`` later (or at a ``heal`` before), from a timer thread: the
        runner goes on with its steps meanwhile, so other faults land inside the partition."""
        one_way = "<->" not in way
        a, b = (h.strip() for h in way.replace("<->", "->").split("->"))
        with self._lock:
            said = self.partition(a, b, one_way)
            # A partition added to one still on: every cut heals when the later one ends.
            at = max(self._heal_at, time.monotonic() + seconds)
            self._cancel_timer()
            self._heal_at = at
            self._timer = threading.Timer(at - time.monotonic(), self._timed_heal)
            self._timer.daemon = True
            self._timer.start()
            return f"{said} for {seconds:g}s ({len(self.cuts)} ways cut)"

    def _timed_heal(self) -> None:
        with self._lock:
            self._timer = None
            self.heal()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._heal_at = 0.0

    def heal(self) -> str | None:
        """Every cut healed: what was healed, or None when nothing was cut."""
        with self._lock:
            self._cancel_timer()
            if not self.cuts:
                return None
            healed = ", ".join(sorted(f"{c.src}->{c.dst}" for c in self.cuts))
            for host in sorted({c.src for c in self.cuts}):
                self._tc(host, "filter", "del", "dev", self._veth(host, True), "egress")
            self.cuts.clear()
            return f"healed {healed}"


def _drop_to(address: str) -> str:
    """Classic BPF (tc's ``bytecode`` form) that returns TC_ACT_SHOT (2) for an IPv4 packet
    to ``address`` and TC_ACT_OK (0) for any other: the frame's Ethernet type at 12, the IPv4
    destination at 30."""
    a, b, c, d = (int(x) for x in address.split("."))
    dst = (a << 24) | (b << 16) | (c << 8) | d
    prog = [
        (0x28, 0, 0, 12),  # ldh [12]: the Ethernet type
        (0x15, 0, 3, 0x0800),  # jeq IPv4, else to "ret 0"
        (0x20, 0, 0, 30),  # ld [30]: the IPv4 destination
        (0x15, 0, 1, dst),  # jeq the address, else to "ret 0"
        (0x06, 0, 0, 2),  # ret TC_ACT_SHOT
        (0x06, 0, 0, 0),  # ret TC_ACT_OK
    ]
    return ",".join([str(len(prog)), *(f"{op} {jt} {jf} {k}" for op, jt, jf, k in prog)])


def leftovers(prefix: str = PREFIX) -> list[tuple[str, str]]:
    """Namespaces and root interfaces whose names start with ``prefix``: ("netns" | "link",
    name). A veth end inside a namespace goes with it and is not listed."""
    found: list[tuple[str, str]] = []
    ns = _ip("netns", "list", check=False).stdout
    for line in ns.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(prefix):
            found.append(("netns", name))
    links = _ip("-o", "link", "show", check=False).stdout
    for line in links.splitlines():
        parts = line.split(":")
        if len(parts) > 1:
            name = parts[1].strip().split("@")[0]
            if name.startswith(prefix):
                found.append(("link", name))
    # Namespaces first: their veths go with them, then the bridge and any root end left.
    return sorted(found, key=lambda f: f[0] != "netns")


class NetnsPostgres(BouncingPostgres):
    """The chaos harness's PostgreSQL, run inside the ``data`` host and listening on its
    address only: the drivers reach it over the network the nemesis cuts."""

    def __init__(self, hosts: Hosts, host: str = "data") -> None:
        super().__init__()
        self.hosts, self.host = hosts, host
        self.settings["listen_addresses"] = f"'{hosts.addr(host)}'"

    def dsn_for(self, dbname: str) -> str:
        dsn = super().dsn_for(dbname)
        return dsn.replace("@127.0.0.1:", f"@{self.hosts.addr(self.host)}:", 1)

    def _initdb(self) -> None:
        super()._initdb()
        assert self._dir is not None
        # initdb's trust lines are for loopback only: the hosts' subnet (and the runner on
        # the bridge) too.
        with (self._dir / "data" / "pg_hba.conf").open("a") as f:
            f.write(f"host all all {self.hosts.subnet}.0/24 trust\n")

    def _spawn(self) -> None:
        """``postgres`` as our own child, as the base class starts it, but entered into the
        host's namespace first (nsenter, as root) and then dropped to the server's user."""
        assert self._dir is not None and self._run_as is not None
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        user: list[str] = []
        if self._run_as.uid is not None:
            user = [f"--setuid={self._run_as.uid}", f"--setgid={self._run_as.gid}"]
        argv = [*self.hosts.prefix_argv(self.host)[:-1], *user, "--"]
        with (self._dir / "server.log").open("ab") as log:
            self._proc = subprocess.Popen(
                [*argv, self._exe("postgres"), "-D", str(self._dir / "data")],
                cwd=self._dir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
