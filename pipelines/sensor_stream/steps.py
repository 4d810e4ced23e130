"""The session step and postprocess of the sensor_stream pipeline (plain numpy, batch-first).
The state is the model's (``[[sequence.state]]``); the step only checks each reading."""

from __future__ import annotations

import numpy as np

CHANNELS = 4
ALARM_Z = 4.0  # |z| above this on any channel raises ALARM


def step(state: None, inputs: dict[str, np.ndarray]) -> tuple[None, dict[str, np.ndarray]]:
    """One reading of the session's sensors.

    Args:
        state: None (this pipeline keeps no state of its own: the model returns it).
        inputs: ``READING`` FP32 ``[1, 4]``, one value per channel.

    Returns:
        ``(None, {"reading": FP32 [1, 4]})``, the core model's input.

    Raises:
        ValueError: a value is not finite (the session's state is left as it was).
    """
    reading = np.asarray(inputs["READING"], dtype=np.float32)
    if reading.shape != (1, CHANNELS) or not np.all(np.isfinite(reading)):
        raise ValueError(f"READING must be {CHANNELS} finite values, got {reading.tolist()}")
    return None, {"reading": reading}


def postprocess(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The model's scores as the response.

    Args:
        inputs: ``z`` FP32 ``[b, 4]`` and ``stateN`` FP32 ``[b, 3, 4]`` (the model's outputs).

    Returns:
        ``Z`` FP32 ``[b, 4]``, ``ALARM`` INT32 ``[b, 1]``: 1 when any ``|z|`` > 4.
    """
    z = np.asarray(inputs["z"], dtype=np.float32)
    return {"Z": z, "ALARM": (np.abs(z) > ALARM_Z).any(axis=1, keepdims=True).astype(np.int32)}
