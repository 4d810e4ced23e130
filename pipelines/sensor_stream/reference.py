"""The stateless reference of sensor_stream: the model's recurrence in numpy, run over a whole
session (the generator proves the served form against it event by event, and the generated
tests compare the served answers with it)."""

from __future__ import annotations

import numpy as np

from pipelines.sensor_stream.model import VAR_FLOOR
from pipelines.sensor_stream.steps import ALARM_Z

ALPHA = 0.1  # the description's [model] constants.alpha


def stream(events: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The answers to a session's events, one row per event.

    Args:
        events: ``READING`` FP32 ``[n, 4]``, the session's readings in order from START.

    Returns:
        ``Z`` FP32 ``[n, 4]`` (each reading against the weighted mean and variance of the
        readings before it; 0 for the first) and ``ALARM`` INT32 ``[n, 1]``.
    """
    readings = np.asarray(events["READING"], np.float32)
    one, alpha = np.float32(1), np.float32(ALPHA)
    count = np.zeros(readings.shape[1], np.float32)
    mean, var = count.copy(), count.copy()
    scores = []
    for x in readings:
        count_next = count + one
        a = np.maximum(alpha, one / count_next)
        diff = x - mean
        scores.append(diff / np.sqrt(var + np.float32(VAR_FLOOR)) * np.minimum(count, one))
        step = a * diff
        mean, var, count = mean + step, (one - a) * (var + step * diff), count_next
    z = np.stack(scores).astype(np.float32)
    return {"Z": z, "ALARM": (np.abs(z) > ALARM_Z).any(axis=1, keepdims=True).astype(np.int32)}
