"""A bounded HTTP GET for collectors that scrape endpoints (OpenMetrics).

One deadline for the whole request (connecting, redirects, headers and body, however
slowly the bytes drip), a bounded number of redirects to http(s) only, headers sent only
to the requested URL's own origin, and a body (decompressed if gzip) of bounded size.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import io
import socket
import time
import zlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urljoin, urlsplit

from sysmetrics.errors import quote

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

MAX_REDIRECTS = 3
_REDIRECT_STATUSES = (301, 302, 303, 307, 308)


def _origin(url: str) -> tuple[str, str, int]:
    """``(scheme, host, port)`` of an http(s) URL."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, (parts.hostname or "").lower(), port


class _DeadlineIO(io.RawIOBase):
    """A socket's reads, each allowed only the time left until ``deadline`` (monotonic s)."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._raw = sock.makefile("rb", buffering=0)  # keeps the socket open while we read
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, b: WriteableBuffer) -> int | None:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out")
        self._sock.settimeout(left)
        return self._raw.readinto(b)

    def close(self) -> None:
        self._raw.close()
        super().close()


class _DeadlineResponse(http.client.HTTPResponse):
    """An HTTP response that must arrive whole by ``deadline`` (monotonic s), however slowly."""

    def __init__(self, sock: socket.socket, *args: Any, deadline: float, **kwargs: Any) -> None:
        super().__init__(sock, *args, **kwargs)
        plain, self.fp = self.fp, io.BufferedReader(_DeadlineIO(sock, deadline))
        plain.close()


def fetch(url: str, headers: Mapping[str, str], timeout: float, max_bytes: int) -> bytes:
    """The body of ``url``'s page, all of it within ``timeout`` seconds from now.

    Follows up to ``MAX_REDIRECTS`` (3) redirects, to http(s) only; ``headers`` go only to
    ``url``'s own scheme, host and port. Asks for no compression, and decompresses gzip
    anyway. The body is at most ``max_bytes`` bytes (after decompression).

    Raises:
        OSError, http.client.HTTPException, ValueError: the request failed, timed out,
            was answered with an error status, or the page is larger than ``max_bytes``.

    """
    deadline = time.monotonic() + timeout
    origin = _origin(url)
    for _ in range(MAX_REDIRECTS + 1):
        parts = urlsplit(url)
        scheme, host, port = _origin(url)
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out")
        if not host:
            raise ValueError(f"no host in {quote(url)!r}")
        https = scheme == "https"
        conn = (http.client.HTTPSConnection if https else http.client.HTTPConnection)(
            host, port, timeout=left
        )
        conn.response_class = cast(
            "type[http.client.HTTPResponse]",
            functools.partial(_DeadlineResponse, deadline=deadline),
        )
        with contextlib.closing(conn):
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            # http.client sends "Accept-Encoding: identity" unless the headers say otherwise
            own = (scheme, host, port) == origin
            conn.request("GET", target, headers=dict(headers) if own else {})
            with conn.getresponse() as response:
                location = response.getheader("Location")
                if response.status in _REDIRECT_STATUSES and location:
                    url = urljoin(url, location.strip())
                    if urlsplit(url).scheme not in ("http", "https"):
                        raise ValueError(
                            f"redirect to {quote(url)!r} refused: only http and https "
                            "redirects are followed"
                        )
                    continue
                if not 200 <= response.status < 300:
                    raise ValueError(f"HTTP {response.status} {quote(response.reason)}")
                return _body(response, max_bytes)
    raise ValueError(f"more than {MAX_REDIRECTS} redirects")


def _body(response: http.client.HTTPResponse, max_bytes: int) -> bytes:
    """The response's body, decompressed if gzip; at most ``max_bytes`` bytes of it."""
    if response.length is not None and response.length > max_bytes:
        raise ValueError(f"response larger than max_bytes={max_bytes}")
    body = response.read(max_bytes + 1)
    if len(body) > max_bytes:
        raise ValueError(f"response larger than max_bytes={max_bytes}")
    if response.length:  # the server closed the connection early
        raise ValueError(f"response ended {response.length} bytes short of its length")
    encoding = (response.getheader("Content-Encoding") or "identity").strip().lower()
    if encoding in ("gzip", "x-gzip"):
        unzip = zlib.decompressobj(16 + zlib.MAX_WBITS)
        body = unzip.decompress(body, max_bytes + 1)
        if len(body) > max_bytes:
            raise ValueError(f"decompressed response larger than max_bytes={max_bytes}")
        if not unzip.eof:
            raise ValueError("gzip response is truncated")
    elif encoding != "identity":
        raise ValueError(f"unsupported Content-Encoding {quote(encoding)!r}")
    return body
