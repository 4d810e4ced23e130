"""The model repository on disk, read the one way: which config sets exist and which file each
uses (:mod:`.config_sets`), how a config is parsed and an ensemble checked (:mod:`.configs`),
and how Triton's data types map to numpy (:mod:`.dtypes`).

The bottom layer of the client: it imports nothing else of this repository, so the data plane,
the control plane, the launcher and the builders all read the repository through it.
"""
