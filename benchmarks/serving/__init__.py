"""The request path and operations: ratio smoke, latency tails, make serve's text pipeline,
priorities, soak."""
