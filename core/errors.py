"""The one exception type the CLI turns into a one-line message."""


class ReplaygateError(Exception):
    """A user-facing error: bad arguments, unreadable DB or config."""
