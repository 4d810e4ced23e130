"""The models a client serves and probes when it is told none: the shipped ensembles whose
probe is built into the client (the names of
:data:`tritonrepo_client.built_in_probes.PROBES`), then every other model whose config declares
its probe, found on the server (``tritonrepo-client health``, the healer) or in the repository
(:func:`tritonrepo_client.model_repository.roles.served_models`: the launcher's default list).

A model leaves :data:`DEFAULT_MODELS` when its config declares its probe (it is then found
like any generated pipeline), so the tuple ends empty once every shipped pipeline is generated
from its description with samples.
"""

from __future__ import annotations

from tritonrepo_client.built_in_probes import PROBES

DEFAULT_MODELS: tuple[str, ...] = tuple(PROBES)

__all__ = ["DEFAULT_MODELS"]
