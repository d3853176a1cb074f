"""A tiny npm registry on 127.0.0.1: the metadata of ``name/version`` and its tarball, for installer tests.

    with NpmRegistry() as registry:
        registry.publish("fake-tool", "1.0.0", {"bin/fake": ("#!/bin/sh\\necho fake 1.0.0\\n", 0o755)})
        install("fake@1.0.0", root=tmp, registry=registry.url)

``publish`` makes the tarball (its files under ``package/``, as npm packs them) and its sha512
integrity; ``publish_tarball`` serves bytes made by the test (a hostile tarball), with the integrity
given or computed. ``gets`` lists the paths asked for, in order.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import tarfile
import threading
import time
import urllib.parse
from http.server import ThreadingHTTPServer
from typing import Callable

from .endpoint import QuietHandler, send_json


def tarball(files: dict[str, tuple[str | bytes, int]], top: str = "package") -> bytes:
    """A gzipped tarball of ``files`` (path -> (content, mode)) under the folder ``top``."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path, (content, mode) in files.items():
            data = content.encode() if isinstance(content, str) else content
            info = tarfile.TarInfo(f"{top}/{path}" if top else path)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def integrity_of(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


class NpmRegistry:
    """A real HTTP server on 127.0.0.1 answering ``GET /<name>/<version>`` and ``GET /tarballs/<n>.tgz``."""

    def __init__(self) -> None:
        self.packages: dict[tuple[str, str], dict] = {}
        self.tarballs: dict[str, bytes] = {}
        self.gets: list[str] = []
        # seconds each tarball's answer waits (installs that overlap)
        self.delay = 0.0
        self._lock = threading.Lock()
        registry = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                path = urllib.parse.unquote(self.path)
                with registry._lock:
                    registry.gets.append(path)
                if path in registry.tarballs:
                    time.sleep(registry.delay)
                    send_json(self, registry.tarballs[path], content_type="application/octet-stream")
                    return
                name, _, version = path.lstrip("/").rpartition("/")
                found = registry.packages.get((name, version))
                if found is None:
                    send_json(self, b'{"error":"not found"}', status=404)
                else:
                    send_json(self, json.dumps(found).encode())

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread: threading.Thread | None = None

    def publish(self, name: str, version: str, files: dict[str, tuple[str | bytes, int]],
                top: str = "package") -> bytes:
        """Serve ``name@version`` holding ``files``; its tarball's bytes."""
        return self.publish_tarball(name, version, tarball(files, top))

    def publish_tarball(self, name: str, version: str, data: bytes, integrity: str | None = None) -> bytes:
        path = f"/tarballs/{len(self.tarballs)}.tgz"
        self.tarballs[path] = data
        self.packages[(name, version)] = {"name": name, "version": version, "dist": {
            "tarball": self.url + path, "integrity": integrity or integrity_of(data)}}
        return data

    def metadata_gets(self, match: Callable[[str], bool] = lambda path: not path.startswith("/tarballs/")) -> int:
        with self._lock:
            return sum(1 for path in self.gets if match(path))

    def start(self) -> "NpmRegistry":
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self.server.shutdown()
            self._thread.join()
            self._thread = None
        self.server.server_close()

    def __enter__(self) -> "NpmRegistry":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
