"""``make bench``: the shipped ensembles on CPU against in-process and FastAPI baselines."""
