"""The launcher process: tritonserver command and options, preflight, repository key, HTTP guard,
supervisor.
"""
