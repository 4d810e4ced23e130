"""Sample sessions for sensor_stream: four sensors' readings, one row per event."""

from __future__ import annotations

import numpy as np

from pipelines.sensor_stream.steps import CHANNELS


def samples() -> list[dict[str, np.ndarray]]:
    """Four sessions of 6 to 14 events: ``READING`` FP32 ``[events, 4]``, channels around 20,
    5, -3 and 100 with noise, a slow drift in session 1 and a spike in sessions 2 and 3."""
    rng = np.random.default_rng(7)
    levels = np.array([20.0, 5.0, -3.0, 100.0])
    sessions = []
    for i, events in enumerate((6, 14, 10, 12)):
        readings = levels + rng.normal(0, 0.5, size=(events, CHANNELS))
        if i == 1:
            readings += np.linspace(0, 3, events)[:, None]
        if i >= 2:
            readings[events - 3, i - 2] += 12.0
        sessions.append({"READING": readings.astype(np.float32)})
    return sessions
