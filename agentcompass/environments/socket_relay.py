"""A relay inside a sandbox's network: 127.0.0.1:PORT to a Unix socket on this machine.

    python -I socket_relay.py SOCKET_PATH

host_process runs it in the session's network (the isolated namespace under
policy ``none``). A Unix socket is a file, so it is reachable from every
network namespace: the relay gives commands in the session exactly one
service (a model gateway) while every other address stays unreachable. It
prints the port it listens on, then joins each connection to a new
connection to SOCKET_PATH. Standard library only, and it imports nothing of
agentcompass: it must start fast and run from any working directory.
"""

from __future__ import annotations

import socket
import sys
import threading


def _pump(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        pass
    try:
        target.shutdown(socket.SHUT_WR)  # pass the end on; the other direction stays open
    except OSError:
        pass


def _serve(client: socket.socket, path: str) -> None:
    with client:
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with upstream:
            try:
                upstream.connect(path)
            except OSError:
                return
            back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
            back.start()
            _pump(client, upstream)
            back.join()


def main() -> None:
    path = sys.argv[1]
    listener = socket.create_server(("127.0.0.1", 0))
    print(listener.getsockname()[1], flush=True)
    while True:
        client, _ = listener.accept()
        threading.Thread(target=_serve, args=(client, path), daemon=True).start()


if __name__ == "__main__":
    main()
