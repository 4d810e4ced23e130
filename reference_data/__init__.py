"""Reference data for builders, tests and benchmarks (never imported by the stubs): texts, click
log, photos, reference image preprocessing.
"""
