"""Whether a Triton server survives a cancelled call (docs/reliability.md, "Cancelling a call crashes Triton 2.51").

Triton 2.51, the PyPI wheel's (``make serve``, the tests), dies with SIGSEGV when a gRPC call is cancelled in flight,
and a deadline passing is a cancellation (fixed in 2.53). So against a server older than 2.53 the clients never
cancel: a deadline ends the *wait*, the call runs to its end inside Triton and its answer is dropped.
"""

from __future__ import annotations

import re

CANCELS_SAFELY_SINCE = (2, 53)
# Closing a client waits this long for calls it gave up on, then closes anyway (and may cancel them).
DRAIN_ON_CLOSE_S = 60.0


def cancels_safely(server_version: str) -> bool:
    """True if a Triton of this version (``server_metadata().version``, e.g. "2.51.0") may be cancelled.
    A version that does not parse counts as unsafe: giving up without cancelling is merely wasteful."""
    found = re.match(r"(\d+)\.(\d+)", server_version)
    return found is not None and (int(found[1]), int(found[2])) >= CANCELS_SAFELY_SINCE
