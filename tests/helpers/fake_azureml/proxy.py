"""An HTTP CONNECT proxy that tunnels every connection to the fake's TLS port.

azure-ai-ml reaches a datastore at ``https://<account>.blob.<storage endpoint>``,
a host name no local resolver knows; the SDKs honour ``HTTPS_PROXY`` (requests
does), so tests point it here and the tunnel ends at the fake, whose
certificate names that host."""

from __future__ import annotations

import socket
import threading
from typing import Optional, Tuple


class ConnectProxy:
    def __init__(self, target: Tuple[str, int]):
        self.target = target
        self.tunnelled = []  # host:port of every CONNECT
        self._sock: Optional[socket.socket] = None

    def start(self) -> ConnectProxy:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    def stop(self) -> None:
        if self._sock is not None:
            self._sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._tunnel, args=(client,), daemon=True).start()

    def _tunnel(self, client: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = client.recv(4096)
            if not chunk:
                client.close()
                return
            head += chunk
        line = head.split(b"\r\n", 1)[0].decode("latin-1").split()
        if len(line) < 2 or line[0] != "CONNECT":
            client.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
            client.close()
            return
        self.tunnelled.append(line[1])
        upstream = socket.create_connection(self.target)
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
