"""Errors that become a single request's error response instead of failing a batch."""


class InvalidRequest(ValueError):
    """A request's inputs cannot be served; its message is sent back to that client only."""
