"""The server side of RFC 6455 WebSockets, as much as the Kubernetes exec protocol uses: the
upgrade handshake with a subprotocol, masked client frames (text, binary, continuation, ping,
close), unmasked server frames. Standard library only; used by the fake API server
(``fake_api.py``) on the socket of an HTTP request that asked for an upgrade."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import socket
import struct
import threading

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455, section 1.3
TEXT, BINARY, CLOSE, PING, PONG, CONTINUATION = 0x1, 0x2, 0x8, 0x9, 0xA, 0x0


def accept_key(key: str) -> str:
    return base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()


class WebSocket:
    """One upgraded connection. ``recv()`` -> (opcode, payload) of whole messages (ping answered,
    close answered and reported as ``(CLOSE, b"")``); ``send`` is thread-safe."""

    def __init__(self, sock: socket.socket, rfile: object) -> None:
        self.sock = sock
        self.rfile = rfile  # the handler's buffered reader: it may hold bytes already read
        self._send = threading.Lock()
        self.closed = False

    def _read(self, n: int) -> bytes:
        data = self.rfile.read(n)  # type: ignore[attr-defined]
        if len(data) < n:
            raise ConnectionError("the client went away")
        return bytes(data)

    def _frame(self) -> tuple[bool, int, bytes]:
        b0, b1 = self._read(2)
        fin, opcode, masked, length = bool(b0 & 0x80), b0 & 0x0F, bool(b1 & 0x80), b1 & 0x7F
        if length == 126:
            (length,) = struct.unpack("!H", self._read(2))
        elif length == 127:
            (length,) = struct.unpack("!Q", self._read(8))
        mask = self._read(4) if masked else b"\0\0\0\0"
        payload = bytearray(self._read(length))
        for i in range(length):
            payload[i] ^= mask[i % 4]
        return fin, opcode, bytes(payload)

    def recv(self) -> tuple[int, bytes]:
        message, first = bytearray(), None
        while True:
            fin, opcode, payload = self._frame()
            if opcode == PING:
                self.send(payload, PONG)
                continue
            if opcode == PONG:
                continue
            if opcode == CLOSE:
                self.close()
                return CLOSE, b""
            if opcode != CONTINUATION:
                first = opcode
            message += payload
            if fin:
                return first or BINARY, bytes(message)

    def send(self, payload: bytes, opcode: int = BINARY) -> None:
        n = len(payload)
        if n < 126:
            head = struct.pack("!BB", 0x80 | opcode, n)
        elif n < 1 << 16:
            head = struct.pack("!BBH", 0x80 | opcode, 126, n)
        else:
            head = struct.pack("!BBQ", 0x80 | opcode, 127, n)
        with self._send:
            if self.closed and opcode != CLOSE:
                raise ConnectionError("closed")
            self.sock.sendall(head + payload)

    def close(self, code: int = 1000) -> None:
        if self.closed:
            return
        with contextlib.suppress(OSError):
            self.send(struct.pack("!H", code), CLOSE)
        self.closed = True
