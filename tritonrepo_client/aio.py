"""asyncio clients: the same models and methods as the thread-based clients, on
``tritonclient.http.aio`` (aiohttp) and ``tritonclient.grpc.aio``.

Example::

    async with AsyncEmbeddingClient("127.0.0.1:8001", "grpc") as client:
        vectors = await asyncio.gather(*(client.embed([t]) for t in texts))

Each asyncio client lives next to its thread-based twin (:mod:`.embedding`, :mod:`.ranking`,
:mod:`.sessions`, :mod:`.classify`) and shares its requests, answers, errors and retries
(:mod:`tritonrepo_client.core`): every failure is one
:class:`tritonrepo_client.errors.ClientError` subclass with the same message.
"""

from tritonrepo_client.async_connection import AsyncModelClient, AsyncTritonConnection
from tritonrepo_client.classify import AsyncClassificationClient
from tritonrepo_client.embedding import AsyncEmbeddingClient
from tritonrepo_client.errors import ClientError
from tritonrepo_client.ranking import AsyncRankingClient
from tritonrepo_client.sessions import AsyncSession, AsyncSessionClient

__all__ = [
    "AsyncClassificationClient",
    "AsyncEmbeddingClient",
    "AsyncModelClient",
    "AsyncRankingClient",
    "AsyncSession",
    "AsyncSessionClient",
    "AsyncTritonConnection",
    "ClientError",
]
