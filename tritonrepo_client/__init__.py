"""Clients for the models of this repository over Triton's KServe v2 HTTP and gRPC protocols.

Python API::

    from tritonrepo_client import EmbeddingClient
    with EmbeddingClient("127.0.0.1:8000", protocol="http") as client:
        vectors = client.embed(["A man is eating food."])   # float32 [1, 384]

    from tritonrepo_client import RankingClient, SessionClient
    with RankingClient() as client:
        best = client.rank(history=[12, 7, 981], candidates=[5, 66, 4000], top_k=2)
    with SessionClient() as client:
        session = client.session("user-42")
        session.send(12, [5, 66, 4000])              # START
        session.send(7, [5, 66, 4000], end=True)     # END

Command line: ``tritonrepo-client embed|rank|session|classify|health|models|rollout|rollback``
(``--help``).
"""

from tritonrepo_client.aio import (
    AsyncEmbeddingClient,
    AsyncRankingClient,
    AsyncSession,
    AsyncSessionClient,
    AsyncTritonConnection,
)
from tritonrepo_client.classify import (
    AsyncClassificationClient,
    Classification,
    ClassificationClient,
)
from tritonrepo_client.connection import GrpcTls, TritonConnection
from tritonrepo_client.control.health import Check, check_health
from tritonrepo_client.control.repository import ModelVersionState, RepositoryClient
from tritonrepo_client.control.rollout import (
    CanaryResult,
    EmbeddingCanary,
    RolloutError,
    RolloutReport,
    TensorCanary,
    rollback,
    rollout,
)
from tritonrepo_client.embedding import EmbeddingClient, cosine_similarity_matrix
from tritonrepo_client.errors import (
    ClientError,
    DeadlineExceeded,
    RequestRejected,
    ServerUnavailable,
    ServerUnreachable,
    VersionNotLoaded,
)
from tritonrepo_client.pipeline import (
    AsyncPipelineClient,
    AsyncPipelineSession,
    PipelineClient,
    PipelineSession,
)
from tritonrepo_client.ranking import Ranking, RankingClient, Session, SessionClient
from tritonrepo_client.retry import RetryPolicy
from tritonrepo_client.routing import RouteTable

__all__ = [
    "AsyncClassificationClient",
    "AsyncEmbeddingClient",
    "AsyncPipelineClient",
    "AsyncPipelineSession",
    "AsyncRankingClient",
    "AsyncSession",
    "AsyncSessionClient",
    "AsyncTritonConnection",
    "CanaryResult",
    "Check",
    "Classification",
    "ClassificationClient",
    "ClientError",
    "DeadlineExceeded",
    "EmbeddingCanary",
    "EmbeddingClient",
    "GrpcTls",
    "ModelVersionState",
    "PipelineClient",
    "PipelineSession",
    "Ranking",
    "RankingClient",
    "RepositoryClient",
    "RequestRejected",
    "RetryPolicy",
    "RolloutError",
    "RolloutReport",
    "RouteTable",
    "ServerUnavailable",
    "ServerUnreachable",
    "Session",
    "SessionClient",
    "TensorCanary",
    "TritonConnection",
    "VersionNotLoaded",
    "check_health",
    "cosine_similarity_matrix",
    "rollback",
    "rollout",
]
