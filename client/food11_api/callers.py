"""Who is calling: the caller keys an operator gives the API (``FOOD11_API_KEYS_FILE``; the file and how a key is
checked: docs/api.md, "Caller keys"), and the caller a request's key names. A file that cannot be used stops the
API at start-up (``CallerKeysError``) rather than leave it open or closed by surprise; only each key's SHA-256 is
kept, compared in constant time with every one; the caller's *name*, never its key, goes into logs and metrics.
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
