"""Canary routes for gRPC clients: the HTTP guard routes HTTP requests itself
(``deploy/guard/routes.js``), but gRPC requests do not pass it. A :class:`RouteTable` given to a
gRPC :class:`~tritonrepo_client.TritonConnection` (or its asyncio twin) reads the guard's routes
(``GET /_guard/routes`` on the server's HTTP port, no key needed) and sends the same share of a
model's requests to its canary. Shadow copies are the guard's alone: gRPC requests are not
copied.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import random
import threading
import time
from collections.abc import Callable
from typing import Any


class RouteTable:
    """The guard's routes, read at most every ``refresh_s`` seconds.

    Args:
        http_url: the server's HTTP ``host:port`` (the guard).
        refresh_s: how old the routes may be, seconds (a canary step lasts a minute or more).
        timeout_s: the read's deadline, seconds; when it fails the last routes read stay in
            force (none at first: every request goes to the model it names).
        draw: a number in [0, 1) per request (random by default).
    """

    def __init__(
        self, http_url: str, refresh_s: float = 5.0, timeout_s: float = 2.0,
        draw: Callable[[], float] = random.random,
    ) -> None:  # fmt: skip
        host, _, port = http_url.rpartition(":")
        self.host, self.port = host or "127.0.0.1", int(port)
        self.refresh_s, self.timeout_s, self.draw = refresh_s, timeout_s, draw
        self._routes: dict[str, Any] = {}
        self._read_at = -float("inf")
        self._lock = threading.Lock()

    def _read(self) -> dict[str, Any]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
        try:
            conn.request("GET", "/_guard/routes")
            response = conn.getresponse()
            body = response.read()
        finally:
            conn.close()
        value = json.loads(body) if response.status == 200 else None
        return value if isinstance(value, dict) else {}

    def routes(self) -> dict[str, Any]:
        """The routes by model (re-read when older than ``refresh_s``)."""
        with self._lock:
            if time.monotonic() - self._read_at >= self.refresh_s:
                self._read_at = time.monotonic()
                with contextlib.suppress(OSError, ValueError):  # else: the last routes read
                    self._routes = self._read()
            return self._routes

    def pick(self, model: str) -> str:
        """The model a request for ``model`` goes to: its canary for the route's weight (a
        percentage) of the draws, else ``model``."""
        route = self.routes().get(model)
        if isinstance(route, dict) and self.draw() * 100 < float(route.get("weight", 0)):
            return str(route["canary"])
        return model
