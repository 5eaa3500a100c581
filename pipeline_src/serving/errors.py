"""The ways starting a server fails, one class each, so callers can catch what they can act on."""


class ServerStartError(RuntimeError):
    """A server process exited, or did not answer in time."""


class TritonStartError(ServerStartError):
    """tritonserver exited or did not become ready; the message carries the end of its log."""


class PortInUseError(ServerStartError):
    """A port a server needs is taken, typically by a server left over from an earlier run."""
