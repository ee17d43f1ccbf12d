"""A TCP relay that stands between a cluster node and its peers, for partition tests (docs/cluster.md,
"Failure model"). A node advertises the relay's address, so every data-plane request to it crosses the
relay, while clients reach the node directly. The relay passes bytes, refuses (closes every connection
and every new one at once: the node is cut off), or blackholes (keeps connections open but delivers
nothing: the node hangs, as behind a dead switch). Leaving a blackhole closes the connections whose bytes
were dropped, since their streams are no longer whole.
"""

from __future__ import annotations

import socket
import threading

PASS, REFUSE, BLACKHOLE = "pass", "refuse", "blackhole"


class Relay:
    def __init__(self, target_port: int):
        self.target_port = target_port
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(256)
        self.port = self._listener.getsockname()[1]
        self._mode = PASS
        self._lock = threading.Lock()
        self._connections: list[dict] = []
        self._closed = False
        threading.Thread(target=self._accept_loop, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def set_mode(self, mode: str):
        with self._lock:
            self._mode = mode
            connections = list(self._connections)
        for c in connections:
            if mode == REFUSE or (mode == PASS and c["poisoned"]):
                self._close(c)
            elif mode == BLACKHOLE:
                c["poisoned"] = True

    def close(self):
        self._closed = True
        self.set_mode(REFUSE)
        try:
            self._listener.close()
        except OSError:
            pass

    def _accept_loop(self):
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                mode = self._mode
            if mode == REFUSE:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            c = {"client": client, "upstream": upstream, "poisoned": mode == BLACKHOLE}
            with self._lock:
                self._connections.append(c)
            threading.Thread(target=self._pump, args=(c, client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(c, upstream, client), daemon=True).start()

    def _pump(self, c, source, sink):
        try:
            while True:
                data = source.recv(256 * 1024)
                if not data:
                    break
                if c["poisoned"]:
                    continue  # dropped: the other side waits for bytes that never come
                sink.sendall(data)
        except OSError:
            pass
        self._close(c)

    def _close(self, c):
        with self._lock:
            if c in self._connections:
                self._connections.remove(c)
        for s in (c["client"], c["upstream"]):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                s.close()
            except OSError:
                pass
