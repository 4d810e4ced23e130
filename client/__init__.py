"""Clients for the models of this repository over Triton's KServe v2 HTTP and gRPC protocols.

Python API::

    from tritonrepo_client import EmbeddingClient
    with EmbeddingClient("127.0.0.1:8000", protocol="http") as client:
        vectors = client.embed(["A man is eating food."])   # float32 [1, 384]

Command line: ``tritonrepo-client embed "text" ...`` (``--help`` for options).
"""

from tritonrepo_client.connection import ClientError, ServerUnreachable, TritonConnection
from tritonrepo_client.embedding import EmbeddingClient, cosine_similarity_matrix

__all__ = [
    "ClientError",
    "EmbeddingClient",
    "ServerUnreachable",
    "TritonConnection",
    "cosine_similarity_matrix",
]
