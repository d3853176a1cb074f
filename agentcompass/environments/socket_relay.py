"""A relay inside a sandbox's network: 127.0.0.1:PORT to a Unix socket on this machine.

    python -I socket_relay.py SOCKET_PATH

host_process runs it in the session's network (the isolated namespace under
policy ``none``). A Unix socket is a file, so it is reachable from every
network namespace: the relay gives commands in the session exactly one
service (a model gateway) while every other address stays unreachable. It
prints the port it listens on, then joins each connection to a new
connection to SOCKET_PATH: at most ``MAX_CONNECTIONS`` at once, each closed
``HALF_OPEN_SECONDS`` after one of its directions ended. Standard library only, and it imports nothing of
agentcompass: it must start fast and run from any working directory.
"""

from __future__ import annotations

import socket
import sys
import threading

# At most this many connections at once (one session's); one more is closed as soon as it is accepted.
# Twice the gateway's own limit, so that the gateway, which fails the attempt that crowds it, sees the crowd.
MAX_CONNECTIONS = 64
# Once one direction of a connection has ended, how long the other may stay open.
HALF_OPEN_SECONDS = 30.0


def _pump(source: socket.socket, target: socket.socket, ended: threading.Event) -> None:
    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        pass
    try:
        target.shutdown(socket.SHUT_WR)  # pass the end on; the other direction stays open for a while
    except OSError:
        pass
    ended.set()


def _serve(client: socket.socket, path: str, slots: threading.Semaphore) -> None:
    try:
        with client:
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            with upstream:
                try:
                    upstream.connect(path)
                except OSError:
                    return
                ended = threading.Event()
                pumps = [threading.Thread(target=_pump, args=(a, b, ended), daemon=True)
                         for a, b in ((client, upstream), (upstream, client))]
                for pump in pumps:
                    pump.start()
                ended.wait()  # one direction ended: the other gets HALF_OPEN_SECONDS more
                for pump in pumps:
                    pump.join(HALF_OPEN_SECONDS)
                if any(pump.is_alive() for pump in pumps):
                    for sock in (client, upstream):
                        try:
                            sock.shutdown(socket.SHUT_RDWR)  # wakes the pump blocked on it
                        except OSError:
                            pass
                    for pump in pumps:
                        pump.join()
    finally:
        slots.release()


def main() -> None:
    path = sys.argv[1]
    listener = socket.create_server(("127.0.0.1", 0))
    print(listener.getsockname()[1], flush=True)
    slots = threading.Semaphore(MAX_CONNECTIONS)
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            continue  # out of descriptors for a moment: the listener stays
        if not slots.acquire(blocking=False):
            client.close()  # MAX_CONNECTIONS are open
            continue
        try:
            threading.Thread(target=_serve, args=(client, path, slots), daemon=True).start()
        except RuntimeError:
            client.close()
            slots.release()


if __name__ == "__main__":
    main()
