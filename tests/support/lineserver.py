"""A TCP server that sends lines to its newest client when a test asks: what
``sources.socket`` reads (Spark's network word count reads ``nc -lk 9999``)."""

from __future__ import annotations

import socket
import threading


class LineServer:
    """On 127.0.0.1, a free port; every connection accepted is kept, the newest gets what
    :meth:`send` sends."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.1)
        self.port = self.server.getsockname()[1]
        self.clients: list[socket.socket] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._done.is_set():
            try:
                conn, _ = self.server.accept()
            except (TimeoutError, OSError):
                continue
            self.clients.append(conn)

    def send(self, data: bytes) -> None:
        self.clients[-1].sendall(data)

    def send_ids(self, ids: list[int]) -> None:
        self.send("".join(f"{i}\n" for i in ids).encode())

    def drop_clients(self) -> None:
        for c in self.clients:
            c.close()

    def close(self) -> None:
        self._done.set()
        self._thread.join(5)
        self.drop_clients()
        self.server.close()
