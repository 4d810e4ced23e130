"""Self-healing: find the steps that cannot serve, reload only those, prove they serve again; its
Prometheus metrics.
"""
