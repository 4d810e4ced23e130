"""Clients for the models of this repository over Triton's KServe v2 HTTP and gRPC protocols.

Python API::

    from tritonrepo_client import EmbeddingClient
    with EmbeddingClient("127.0.0.1:8000", protocol="http") as client:
        vectors = client.embed(["A man is eating food."])   # float32 [1, 384]

Command line: ``tritonrepo-client embed|health|models|rollout|rollback`` (``--help``).
"""

from tritonrepo_client.connection import (
    ClientError,
    ServerUnreachable,
    TritonConnection,
    VersionNotLoaded,
)
from tritonrepo_client.embedding import EmbeddingClient, cosine_similarity_matrix
from tritonrepo_client.health import Check, check_health
from tritonrepo_client.repository import ModelVersionState, RepositoryClient
from tritonrepo_client.rollout import (
    CanaryResult,
    EmbeddingCanary,
    RolloutError,
    RolloutReport,
    TensorCanary,
    rollback,
    rollout,
)

__all__ = [
    "CanaryResult",
    "Check",
    "ClientError",
    "EmbeddingCanary",
    "EmbeddingClient",
    "ModelVersionState",
    "RepositoryClient",
    "RolloutError",
    "RolloutReport",
    "ServerUnreachable",
    "TensorCanary",
    "TritonConnection",
    "VersionNotLoaded",
    "check_health",
    "cosine_similarity_matrix",
    "rollback",
    "rollout",
]
