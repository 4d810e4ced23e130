"""Control plane: model repository API, rollout and rollback, config sets, load checks, health,
self-healing.
"""
