"""What runs inside a Python-backend stub: the PythonStep request loop, per-request errors, the
error log and step metrics.
"""
