"""Who is calling: the caller keys an operator gives the API (``FOOD11_API_KEYS_FILE``), and the caller a
request's key names.

The file has one key a line, ``name:key`` or a bare key (named ``caller-<line>``); blank lines and lines
starting with ``#`` are skipped, so a Kubernetes Secret mounted as a file works as it is. It is read once, at
start-up: a file that is missing, unreadable, empty or malformed stops the API there (``CallerKeysError``)
rather than leave it open or closed by surprise. Only each key's SHA-256 is kept.

A request presents its key as ``Authorization: Bearer <key>`` or ``X-API-Key: <key>``. It is compared with
every known key in constant time (``hmac.compare_digest`` of fixed-length digests, every key, no early exit),
so the time taken says neither which key nor how much of one matched. The caller's *name*, never its key,
goes into logs and metrics.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

BEARER_HEADER = "Authorization"
API_KEY_HEADER = "X-API-Key"
# Long enough that guessing is hopeless (python -c 'import secrets; print(secrets.token_urlsafe(32))').
MIN_KEY_CHARS = 16
# Names go into metrics labels and logs: a plain token only.
SAFE_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
# What an HTTP header can carry without quoting: printable ASCII, no spaces.
SAFE_KEY = re.compile(r"[\x21-\x7e]+")


class CallerKeysError(ValueError):
    """The keys file cannot be used: the API does not start."""


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("latin-1", "replace")).digest()


@dataclass(frozen=True)
class CallerKeys:
    """The known callers: (name, SHA-256 of the key), in the file's order."""

    callers: tuple[tuple[str, bytes], ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.callers)

    @classmethod
    def read(cls, path: Path) -> CallerKeys:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise CallerKeysError(f"cannot read the caller keys file {path}: {reason}") from exc
        return cls.parse(text, str(path))

    @classmethod
    def parse(cls, text: str, source: str = "the caller keys") -> CallerKeys:
        callers: dict[str, bytes] = {}
        for number, line in enumerate(text.splitlines(), start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, colon, key = line.partition(":")
            name, key = (name.strip(), key.strip()) if colon else (f"caller-{number}", line)
            where = f"{source}, line {number}"
            if not SAFE_NAME.fullmatch(name):
                raise CallerKeysError(f"{where}: the name must be 1 to 64 of A-Z a-z 0-9 . _ - (got {name!r})")
            if len(key) < MIN_KEY_CHARS or not SAFE_KEY.fullmatch(key):
                raise CallerKeysError(
                    f"{where}: {name}'s key must be at least {MIN_KEY_CHARS} printable ASCII characters without "
                    "spaces (make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))')"
                )
            if name in callers:
                raise CallerKeysError(f"{where}: the name {name} is given twice")
            if _digest(key) in callers.values():
                raise CallerKeysError(f"{where}: {name}'s key is another caller's too: each caller needs its own")
            callers[name] = _digest(key)
        if not callers:
            raise CallerKeysError(f"{source} holds no key: give one a line (name:key), or unset FOOD11_API_KEYS_FILE")
        return cls(tuple(callers.items()))

    def caller(self, key: str) -> str | None:
        """The name of the caller whose key this is; None for no known key. Every key is compared, whatever
        matched before."""
        presented, found = _digest(key), None
        for name, digest in self.callers:
            if hmac.compare_digest(presented, digest):
                found = name
        return found


def presented_key(headers: Mapping[bytes, bytes]) -> str | None:
    """The key a request presents (ASGI headers, lower-case names): ``Authorization: Bearer <key>``, else
    ``X-API-Key: <key>``; None when it presents neither."""
    scheme, _, credentials = headers.get(b"authorization", b"").decode("latin-1").strip().partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip()
    return headers.get(API_KEY_HEADER.lower().encode(), b"").decode("latin-1").strip() or None
