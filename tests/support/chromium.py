"""Open a page in a real headless Chromium through the DevTools protocol over a pipe.

Chromium runs with ``--remote-debugging-pipe``: it reads protocol commands on fd 3 and writes
replies and events on fd 4, each message a JSON object ended by a NUL byte. That needs no port,
no websocket library and no browser download: Debian's ``chromium`` package is enough. The page
loads with every network name unresolvable, and ``PageLoad`` records each request, each failed
resource, console errors and uncaught exceptions, and a PNG screenshot.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FLAGS = (
    "--headless",
    "--no-sandbox",  # root in a container: Chromium's sandbox needs user namespaces
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--host-resolver-rules=MAP * ~NOTFOUND",  # a page that fetches from the network fails loudly
    "--hide-scrollbars",
    "--remote-debugging-pipe",
)


def chromium_path() -> str | None:
    """The Chromium binary on PATH (Debian: ``chromium``), or None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass
class PageLoad:
    """What happened while a page loaded: its requests, failures, errors and a screenshot."""

    requests: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    screenshot: bytes = b""
    title: str = ""
    images: list[dict[str, Any]] = field(default_factory=list)
    elements: dict[str, bytes] = field(default_factory=dict)  # CSS selector -> PNG of that element


class Chromium:
    """One headless Chromium with a fresh profile; use as a context manager."""

    def __init__(self, binary: str, *, width: int = 1280, height: int = 2000) -> None:
        self.binary = binary
        self.width, self.height = width, height
        self._next_id = 0
        self._buffer = b""
        self._events: list[dict[str, Any]] = []

    def __enter__(self) -> Chromium:
        self._profile = tempfile.mkdtemp(prefix="mlbench-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def plumb() -> None:  # in the child: the pipe ends become fds 3 and 4
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)

        self.proc = subprocess.Popen(
            [
                self.binary,
                *FLAGS,
                f"--user-data-dir={self._profile}",
                f"--window-size={self.width},{self.height}",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=plumb,
            pass_fds=(3, 4),
        )
        os.close(to_child_r)
        os.close(from_child_w)
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError, TimeoutError, RuntimeError):
            self.send("Browser.close", timeout=10)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_child)
        os.close(self._from_child)
        shutil.rmtree(self._profile, ignore_errors=True)

    # -- protocol -------------------------------------------------------------------------------
    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("Chromium did not answer in time")
            ready, _, _ = select.select([self._from_child], [], [], left)
            if ready:
                chunk = os.read(self._from_child, 1 << 20)
                if not chunk:
                    raise RuntimeError(f"Chromium exited (code {self.proc.poll()})")
                self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    def send(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        session: str | None = None,
        timeout: float = 30,
    ) -> dict[str, Any]:
        """Send one command and wait for its reply; events that arrive meanwhile are kept."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return dict(reply.get("result") or {})
            self._events.append(reply)

    def wait_for(self, method: str, *, timeout: float = 30) -> dict[str, Any]:
        """Wait for the next event ``method`` (events seen before are searched first)."""
        deadline = time.monotonic() + timeout
        while True:
            for event in self._events:
                if event.get("method") == method:
                    return event
            self._events.append(self._read_message(deadline))

    # -- pages ------------------------------------------------------------------------------------
    def open(self, path: Path, *, timeout: float = 60, elements: tuple[str, ...] = ()) -> PageLoad:
        """Load ``path`` in a new tab and report what it requested, what failed, and how it looks
        (the viewport, and each of ``elements``, CSS selectors, as Chromium drew it)."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Network", "Runtime", "Log"):
            self.send(f"{domain}.enable", session=session)
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False},
            session=session,
        )
        self._events.clear()
        self.send("Page.navigate", {"url": path.resolve().as_uri()}, session=session)
        self.wait_for("Page.loadEventFired", timeout=timeout)
        load = PageLoad()
        for event in self._events:
            method, params = event.get("method"), event.get("params") or {}
            if method == "Network.requestWillBeSent":
                load.requests.append(params["request"]["url"])
            elif method == "Network.loadingFailed":
                load.failed.append(f"{params.get('type')}: {params.get('errorText')}")
            elif method == "Network.responseReceived" and params["response"].get("status", 200) >= 400:
                load.failed.append(f"{params['response']['url']}: HTTP {params['response']['status']}")
            elif method == "Runtime.exceptionThrown":
                load.errors.append(str(params.get("exceptionDetails", {}).get("text")))
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                load.errors.append(str(params["entry"].get("text")))
        images = self.send(
            "Runtime.evaluate",
            {
                "expression": "JSON.stringify([...document.images].map(i => ({src: i.src.slice(0, 40), "
                "complete: i.complete, width: i.naturalWidth, height: i.naturalHeight})))",
                "returnByValue": True,
            },
            session=session,
        )
        load.images = json.loads(images["result"]["value"])
        title = self.send(
            "Runtime.evaluate", {"expression": "document.title", "returnByValue": True}, session=session
        )
        load.title = str(title["result"]["value"])
        shot = self.send("Page.captureScreenshot", {"format": "png"}, session=session)
        load.screenshot = base64.b64decode(shot["data"])
        for selector in elements:
            box = self.send(
                "Runtime.evaluate",
                {
                    "expression": f"(() => {{ const r = document.querySelector({json.dumps(selector)})"
                    ".getBoundingClientRect(); return JSON.stringify({x: r.left + window.scrollX, "
                    "y: r.top + window.scrollY, width: r.width, height: r.height}); })()",
                    "returnByValue": True,
                },
                session=session,
            )
            clip = {**json.loads(box["result"]["value"]), "scale": 1}
            shot = self.send(
                "Page.captureScreenshot",
                {"format": "png", "clip": clip, "captureBeyondViewport": True},
                session=session,
            )
            load.elements[selector] = base64.b64decode(shot["data"])
        self.send("Target.closeTarget", {"targetId": target})
        return load
