"""Whether a Triton server survives a cancelled call, and how to give up on a call without cancelling it.

Triton 2.51 (the server of the PyPI wheel ``nvidia-pytriton==0.7.0``, which ``make serve`` and the tests
run) dies with SIGSEGV when a gRPC inference call is cancelled while its request is in flight: the gRPC
frontend frees the call's state, then a step's response completes into it
(triton-inference-server/server#7368 and #7877; fixed by #7840, released in 2.53 = 24.12). A deadline
passing is a cancellation, and so is a channel closing under a call. Measured here (tiny stand-ins,
tests/integration/test_client_cancellation.py): 8 rounds of 8 concurrent calls with deadlines from 3 to 100 ms crash it.

So, against a server older than 2.53 the clients never cancel: a deadline ends the *wait*, the call runs
to its end inside Triton and its answer is dropped, and closing a client first lets such calls finish.
NVIDIA's image (Dockerfile.triton: 25.08 = 2.60) cancels for real, which frees Triton of abandoned work.
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


def gave_up(timeout_s: float, server_version: str) -> str:
    return (
        f"no answer within the deadline of {timeout_s:g} s; the call runs on inside Triton {server_version}, "
        "which cannot cancel it safely (it is answered and dropped)"
    )
