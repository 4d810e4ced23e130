"""Rate-limited server-side logging of per-request errors.

Triton 2.51 sends a Python step's ``InferenceResponse(error=...)`` to the client and writes
nothing to the server log, so a bad client is invisible to whoever runs the server.
:class:`ErrorLog` writes one line per error answer — model, request id, message — through the
Python backend's logger (``pb_utils.Logger``, which lands in Triton's log), at most ``burst``
lines at once and ``per_second`` lines a second after that; the errors it skips are counted and
the count is reported on the next line it writes, so a flood of bad requests cannot flood the
log or slow the step.
"""

from __future__ import annotations

import time
from collections.abc import Callable

# Defaults: 20 lines at once, then 1 a second per model instance: a real incident shows up in
# full, a client sending thousands of bad requests a second costs one line a second.
DEFAULT_BURST = 20
DEFAULT_PER_SECOND = 1.0
MAX_MESSAGE_CHARS = 500


class ErrorLog:
    """Token bucket in front of a log function.

    Args:
        write: writes one line (e.g. ``pb_utils.Logger.log_warn``).
        burst: lines that may be written back to back (bucket size), >= 1.
        per_second: lines per second refilled after the burst, > 0.
        clock: monotonic clock in seconds (for tests).

    Raises:
        ValueError: ``burst`` < 1 or ``per_second`` <= 0.
    """

    def __init__(
        self,
        write: Callable[[str], object],
        burst: int = DEFAULT_BURST,
        per_second: float = DEFAULT_PER_SECOND,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if burst < 1 or per_second <= 0:
            raise ValueError(f"burst must be >= 1 and per_second > 0, got {burst}, {per_second}")
        self._write = write
        self._burst = float(burst)
        self._rate = per_second
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()
        self.suppressed = 0  # errors not written since the last line that was

    def error(self, model: str, request_id: str, message: str) -> bool:
        """Log one request's error answer, unless the rate limit says skip.

        Args:
            model: the model that answered with the error.
            request_id: the request's id as the client set it ("" when it set none).
            message: the error message sent to the client (cut to 500 characters).

        Returns:
            True if a line was written, False if it was counted as suppressed.
        """
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._last) * self._rate)
        self._last = now
        if self._tokens < 1.0:
            self.suppressed += 1
            return False
        self._tokens -= 1.0
        text = " ".join(message.split())
        if len(text) > MAX_MESSAGE_CHARS:
            text = text[: MAX_MESSAGE_CHARS - 1] + "…"
        line = f"request error: model={model} request_id={request_id or '-'}: {text}"
        if self.suppressed:
            line += f" ({self.suppressed} earlier error(s) not logged: rate limit)"
            self.suppressed = 0
        self._write(line)
        return True
