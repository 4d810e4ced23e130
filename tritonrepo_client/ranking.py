"""Clients of the CTR models: ``ctr_ranking`` (stateless: :class:`RankingClient`,
:class:`AsyncRankingClient`) and ``ctr_session`` (sequences: :mod:`tritonrepo_client.sessions`,
re-exported here). Requests and answers: :mod:`tritonrepo_client.ranking_requests`."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tritonrepo_client.async_connection import AsyncModelClient
from tritonrepo_client.connection import ModelClient
from tritonrepo_client.ranking_requests import (
    OUTPUTS,
    Ranking,
    is_id,
    item_ids,
    rank_request,
    ranking,
)
from tritonrepo_client.session_requests import (
    check_event,
    read_checked_events,
    read_events,
    read_numbered_events,
)
from tritonrepo_client.sessions import (
    AsyncSession,
    AsyncSessionClient,
    Session,
    SessionClient,
    SessionEvents,
)

_ids = item_ids  # the name the asyncio module and older callers import
_is_id = is_id


class RankingClient(ModelClient):
    """Top-K candidates for a user from the ``ctr_ranking`` ensemble (arguments:
    :class:`ModelClient`; ``model`` defaults to ``ctr_ranking``)."""

    DEFAULT_MODEL = "ctr_ranking"

    def rank(
        self,
        history: Sequence[int] | np.ndarray,
        candidates: Sequence[int] | np.ndarray,
        top_k: int | None = None,
        timeout_s: float | None = None,
        priority: int | None = None,
        timeout_us: int | None = None,
    ) -> Ranking:
        """Rank ``candidates`` (1..512 ids) for a user with ``history`` (ids, newest last).

        ``top_k`` defaults to the server's (10); it is cut to ``len(candidates)``.
        ``timeout_s``: this call's deadline, seconds (default: the client's). ``priority``: 1
        realtime, 2 bulk (default: the client's); ``timeout_us``: Triton's queue timeout in µs
        when it should differ from the deadline (:mod:`tritonrepo_client.scheduling`).

        Raises:
            ValueError: ids are not integers.
            ServerUnreachable: no server at the URL.
            ClientError: the server rejected the request (e.g. no or > 512 candidates,
                ``top_k`` ≤ 0), with Triton's message.
        """
        inputs = rank_request(history, candidates, top_k)
        options = self.scheduling(priority, timeout_us)
        return ranking(
            self.connection.infer(self.model, inputs, OUTPUTS, timeout_s=timeout_s, **options)
        )


class AsyncRankingClient(AsyncModelClient):
    """:class:`RankingClient` for asyncio."""

    DEFAULT_MODEL = "ctr_ranking"

    async def rank(
        self,
        history: Sequence[int] | np.ndarray,
        candidates: Sequence[int] | np.ndarray,
        top_k: int | None = None,
        timeout_s: float | None = None,
        priority: int | None = None,
        timeout_us: int | None = None,
    ) -> Ranking:
        """Rank ``candidates`` for a user with ``history`` (as :meth:`RankingClient.rank`).

        Raises:
            ValueError, ServerUnreachable, ClientError: as :meth:`RankingClient.rank`.
        """
        inputs = rank_request(history, candidates, top_k)
        options = self.scheduling(priority, timeout_us)
        return ranking(
            await self.connection.infer(self.model, inputs, OUTPUTS, timeout_s=timeout_s, **options)
        )


__all__ = [
    "OUTPUTS",
    "AsyncRankingClient",
    "AsyncSession",
    "AsyncSessionClient",
    "Ranking",
    "RankingClient",
    "Session",
    "SessionClient",
    "SessionEvents",
    "check_event",
    "read_checked_events",
    "read_events",
    "read_numbered_events",
]
