"""Headless Chromium driven through its DevTools protocol, with the standard library only.

Starts Debian's chromium (/usr/bin/chromium) headless on a free DevTools port, opens one page
and talks to it over the page's WebSocket: evaluate JavaScript, take screenshots. The WebSocket
client is the minimum the protocol needs (RFC 6455 text frames, client-masked, no
extensions).
"""

import base64
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request


class WebSocket:
    def __init__(self, url, timeout=30):
        parts = urllib.parse.urlparse(url)
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {parts.path} HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\n"
                           f"Upgrade: websocket\r\nConnection: Upgrade\r\n"
                           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n")
                          .encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("DevTools closed the WebSocket handshake")
            head += chunk
        head, self.buffer = head.split(b"\r\n\r\n", 1)
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError(f"WebSocket handshake refused: {head[:200]!r}")

    def send(self, text):
        payload = text.encode()
        header = bytes([0x81])  # FIN, text
        n = len(payload)
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 1 << 16:
            header += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(header + mask + masked)

    def _read(self, n):
        while len(self.buffer) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("DevTools closed the WebSocket")
            self.buffer += chunk
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def receive(self):
        message = b""
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            payload = self._read(n)
            opcode = b0 & 0x0F
            if opcode == 0x8:
                raise ConnectionError("DevTools closed the WebSocket")
            if opcode in (0x9, 0xA):  # ping, pong: not used by DevTools
                continue
            message += payload
            if b0 & 0x80:
                return message.decode()

    def close(self):
        self.sock.close()


class Browser:
    """One headless Chromium with one page."""

    def __init__(self, width=1400, height=1800):
        # Not in bazel's TEST_TMPDIR: Chromium's sockets in the profile need a short path.
        self.profile = tempfile.mkdtemp(prefix="cdp-")
        binary = shutil.which("chromium") or "/usr/bin/chromium"
        self.proc = subprocess.Popen(
            [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--no-default-browser-check", "--disable-extensions",
             "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
             f"--user-data-dir={self.profile}", f"--window-size={width},{height}",
             "about:blank"],
            # Chromium's own temporary folder (org.chromium.Chromium.*) goes in the profile,
            # which close() removes; in TMPDIR it outlived every run.
            env=dict(os.environ, TMPDIR=self.profile),
            # Its own process group, so that close() ends its helper processes too.
            start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.ws = None
        try:
            self.connect()
        except BaseException:
            self.close()  # no browser and no profile left behind
            raise
        self.next_id = 0

    def connect(self):
        deadline = time.time() + 60
        port = None
        while port is None:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited {self.proc.returncode} before DevTools")
            m = re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line)
            if m:
                port = int(m.group(1))
            if time.time() > deadline:
                raise RuntimeError("chromium did not start DevTools within 60 s")
        self.port = port
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list"))
        page = next(t for t in targets if t["type"] == "page")
        self.ws = WebSocket(page["webSocketDebuggerUrl"])

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            reply = json.loads(self.ws.receive())
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def navigate(self, url):
        self.call("Page.enable")
        self.call("Page.navigate", url=url)
        deadline = time.time() + 30
        while self.evaluate("document.readyState") != "complete":
            if time.time() > deadline:
                raise RuntimeError(f"{url} did not load within 30 s")
            time.sleep(0.1)

    def evaluate(self, expression):
        """The value of a JavaScript expression (a promise is awaited)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path):
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(data["data"]))

    def close(self):
        try:
            if self.ws is not None:
                self.ws.close()
        finally:
            # Chromium's helpers (network service, zygote) outlived a kill of the browser alone
            # and wrote into the profile after it was removed, leaving it behind.
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
            deadline = time.time() + 5
            while True:
                shutil.rmtree(self.profile, ignore_errors=True)
                if not os.path.exists(self.profile) or time.time() > deadline:
                    break
                time.sleep(0.1)
