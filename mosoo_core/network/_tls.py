"""Just enough TLS to read the server name a client asks for: the ClientHello's SNI.

The proxy never terminates TLS; it reads the first handshake message in the clear (TLS 1.0
to 1.3 all send it unencrypted), checks that its SNI is the host the CONNECT named, and then
forwards the very bytes it read. The parser is incremental (a ClientHello may be split over
several records and TCP reads) and strict: anything it cannot read is refused, not guessed.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_CLIENT_HELLO_BYTES = 16 * 1024
_RECORD_HEADER = 5
_HANDSHAKE_HEADER = 4
_CONTENT_HANDSHAKE = 22
_CLIENT_HELLO = 1
_EXTENSION_SERVER_NAME = 0
_NAME_TYPE_HOST = 0
_MAX_RECORD = 2**14  # plaintext record limit, RFC 8446 section 5.1


class NotClientHello(ValueError):
    """The bytes are not a well-formed TLS ClientHello (or one larger than we read)."""


@dataclass(frozen=True)
class ClientHello:
    server_name: str | None


class _Cursor:
    """Bounds-checked reads over one message: a short read is a malformed message."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.offset = 0

    def take(self, size: int) -> bytes:
        if self.offset + size > len(self.data):
            raise NotClientHello("truncated ClientHello")
        chunk = self.data[self.offset : self.offset + size]
        self.offset += size
        return chunk

    def number(self, size: int) -> int:
        return int.from_bytes(self.take(size), "big")

    def vector(self, length_size: int) -> bytes:
        return self.take(self.number(length_size))

    @property
    def done(self) -> bool:
        return self.offset == len(self.data)


def _first_handshake_message(data: bytes) -> bytes | None:
    """The first handshake message carried by the records at the start of `data` (it may
    span several), None while incomplete. Records after it (a TLS 1.3 client may send
    ChangeCipherSpec or early data right behind its ClientHello) are not read."""
    payload = bytearray()
    offset = 0
    while offset + _RECORD_HEADER <= len(data):
        content_type, major = data[offset], data[offset + 1]
        length = int.from_bytes(data[offset + 3 : offset + 5], "big")
        if content_type != _CONTENT_HANDSHAKE or major != 3 or length > _MAX_RECORD:
            raise NotClientHello("not a TLS handshake record")
        if offset + _RECORD_HEADER + length > len(data):
            return None
        payload += data[offset + _RECORD_HEADER : offset + _RECORD_HEADER + length]
        offset += _RECORD_HEADER + length
        if len(payload) >= _HANDSHAKE_HEADER:
            if payload[0] != _CLIENT_HELLO:
                raise NotClientHello("first handshake message is not a ClientHello")
            size = int.from_bytes(payload[1:4], "big")
            if size > MAX_CLIENT_HELLO_BYTES:
                raise NotClientHello("ClientHello too large")
            if len(payload) >= _HANDSHAKE_HEADER + size:
                return bytes(payload[_HANDSHAKE_HEADER : _HANDSHAKE_HEADER + size])
    return None


def parse_client_hello(data: bytes) -> ClientHello | None:
    """The ClientHello at the start of `data`, None while more bytes are needed.

    Raises `NotClientHello` for anything else, and once `MAX_CLIENT_HELLO_BYTES` have been
    read without a complete message (so a client cannot make the proxy buffer more)."""
    if data and data[0] != _CONTENT_HANDSHAKE:
        raise NotClientHello("not TLS")
    body = _first_handshake_message(data)
    if body is not None:
        return ClientHello(server_name=_server_name(body))
    if len(data) >= MAX_CLIENT_HELLO_BYTES:
        raise NotClientHello("ClientHello too large")
    return None


def _server_name(body: bytes) -> str | None:
    cursor = _Cursor(body)
    cursor.take(2 + 32)  # legacy_version, random
    cursor.vector(1)  # legacy_session_id
    cursor.vector(2)  # cipher_suites
    cursor.vector(1)  # legacy_compression_methods
    if cursor.done:
        return None  # no extensions at all (TLS 1.0 style)
    extensions = _Cursor(cursor.vector(2))
    if not cursor.done:
        raise NotClientHello("bytes after the extensions")
    seen: set[int] = set()
    name: str | None = None
    while not extensions.done:
        kind = extensions.number(2)
        content = extensions.vector(2)
        # A repeated extension is illegal (RFC 8446 4.2); two SNIs could fool one reader.
        if kind in seen:
            raise NotClientHello("repeated extension")
        seen.add(kind)
        if kind == _EXTENSION_SERVER_NAME:
            name = _host_name(content)
    return name


def _host_name(extension: bytes) -> str:
    outer = _Cursor(extension)
    names = _Cursor(outer.vector(2))
    if not outer.done:
        raise NotClientHello("bytes after the server name list")
    host: str | None = None
    while not names.done:
        name_type = names.number(1)
        value = names.vector(2)
        if name_type != _NAME_TYPE_HOST:
            continue
        if host is not None:
            raise NotClientHello("two host names in the server name list")
        if not value or not value.isascii() or b"\x00" in value:
            raise NotClientHello("server name is not an ASCII host name")
        host = value.decode("ascii")
    if host is None:
        raise NotClientHello("server name list without a host name")
    return host
