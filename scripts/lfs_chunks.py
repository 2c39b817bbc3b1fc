"""WSGI middleware for the test LFS server (scripts/lfs-server.sh): sends
each response body in chunks of 1 MiB. giftless hands its local-disk
objects to the server as file objects, which a WSGI server iterates line
by line; WTXT parts are text of short lines, so each object would leave
as hundreds of thousands of small writes, a cost of that server that no
LFS host has."""

from collections.abc import Callable, Iterable, Iterator
from typing import Any

CHUNK = 1 << 20


class Chunked:
    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterator[bytes]:
        body = self.app(environ, start_response)
        try:
            buf = bytearray()
            for piece in body:
                buf += piece
                if len(buf) >= CHUNK:
                    yield bytes(buf)
                    buf.clear()
            if buf:
                yield bytes(buf)
        finally:
            close = getattr(body, "close", None)
            if close is not None:
                close()
