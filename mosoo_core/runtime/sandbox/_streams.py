"""Small helpers both backends use to move bytes in and out of a sandbox."""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from typing import IO

from mosoo_core.runtime.sandbox._base import CHUNK_BYTES, MAX_EXEC_OUTPUT_BYTES, TarData


def iter_chunks(data: TarData) -> Iterator[bytes]:
    """bytes, a binary file or an iterable of byte chunks, as chunks of at most CHUNK_BYTES."""
    if isinstance(data, bytes | bytearray | memoryview):
        view = memoryview(data)
        for start in range(0, len(view), CHUNK_BYTES):
            yield bytes(view[start : start + CHUNK_BYTES])
    elif isinstance(data, io.IOBase) or hasattr(data, "read"):
        reader: IO[bytes] = data  # type: ignore[assignment]
        while chunk := reader.read(CHUNK_BYTES):
            yield chunk
    else:
        for chunk in data:
            if chunk:
                yield bytes(chunk)


class CappedBuffer:
    """Collects output up to MAX_EXEC_OUTPUT_BYTES and remembers whether it dropped any."""

    def __init__(self, limit: int = MAX_EXEC_OUTPUT_BYTES) -> None:
        self._parts: list[bytes] = []
        self._size = 0
        self._limit = limit
        self.truncated = False

    def write(self, chunk: bytes) -> None:
        room = self._limit - self._size
        if room <= 0:
            self.truncated = self.truncated or bool(chunk)
            return
        if len(chunk) > room:
            chunk = chunk[:room]
            self.truncated = True
        self._parts.append(chunk)
        self._size += len(chunk)

    def getvalue(self) -> bytes:
        return b"".join(self._parts)


def drain_in_thread(stream: IO[bytes], sink: CappedBuffer) -> threading.Thread:
    """Read a pipe to its end in a daemon thread (so a full pipe never blocks the child)."""

    def run() -> None:
        try:
            while chunk := stream.read(CHUNK_BYTES):
                sink.write(chunk)
        except (OSError, ValueError):
            pass

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread
