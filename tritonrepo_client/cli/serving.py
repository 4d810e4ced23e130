"""The command line's serving commands that check or replay, ``health`` and ``session`` (the
parser is in :mod:`tritonrepo_client.cli.app`)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable

from tritonrepo_client.cli.control import tls_from_args
from tritonrepo_client.connection import ClientError, TritonConnection
from tritonrepo_client.control import repository_key
from tritonrepo_client.control.health import check_health
from tritonrepo_client.control.repository import RepositoryClient
from tritonrepo_client.ranking import SessionClient, read_checked_events
from tritonrepo_client.validation import parse_correlation_id


def served_models(repo: RepositoryClient, conn: TritonConnection) -> list[str]:
    """The models ``health`` checks by default, by name: every loaded model whose config
    declares its probe (every described pipeline's does), and every model that the local
    repository serves by default (:func:`tritonrepo_format.roles.served_models`)
    whose load failed (the repository index, with the key: UNAVAILABLE for a reason other than
    "unloaded"). A model unloaded through the API is not checked (Triton's index does not tell
    an unload asked for from one that followed a step's: name it with ``--model``), nor one the
    server never loaded. None when the loaded models cannot be listed (the statistics endpoint
    does not answer)."""
    from tritonrepo_client.control.config_sets import probed_models
    from tritonrepo_client.control.local import local_repository
    from tritonrepo_format.roles import served_models as served_by_default

    try:
        served = set(probed_models(repo, conn))
    except ClientError:
        served = set()
    try:
        failed = {
            row.name
            for row in repo.index()
            if row.state == "UNAVAILABLE" and row.reason != "unloaded"
        }
    except ClientError:
        return sorted(served)  # no key: what is loaded is all that can be known
    if failed:
        served |= failed & set(served_by_default(local_repository().model_repository))
    return sorted(served)


def health_command(args: argparse.Namespace) -> int:
    """``health``: ``ok``/``FAIL`` per check, ``WARN`` for findings that do not fail it (a
    model not served stuck LOADING or failed, read from the repository index with the key);
    exit 1 unless every served model serves."""
    try:
        key = repository_key.resolve_key(args.repository_key_file)
    except repository_key.RepositoryKeyError as exc:
        key, key_error = "", str(exc)
    else:
        key_error = None
    with (
        TritonConnection(args.url, args.protocol, args.timeout, tls_from_args(args)) as conn,
        RepositoryClient(
            args.url, args.protocol, key=key or "", timeout_s=args.timeout, tls=tls_from_args(args)
        ) as repo,
    ):
        checks = check_health(
            conn, args.models or served_models(repo, conn), live_only=args.live, repository=repo
        )
    for check in checks:
        tag = "WARN" if check.warning else "ok  " if check.ok else "FAIL"
        detail = check.detail
        if check.name == "repository index" and key_error:
            detail += f"; {key_error}"
        print(f"{tag} {check.name}: {detail}")
    return 0 if all(c.ok for c in checks) else 1


def session_command(args: argparse.Namespace) -> int:
    """Replay a session. A file is read and every line checked before anything is sent (a bad
    line: nothing sent); stdin is streamed, each line checked before the event ahead of it is
    sent, so a bad line ends the session with the previous event (:meth:`SessionClient.replay`).
    """
    correlation_id = parse_correlation_id(args.correlation_id, protocol=args.protocol)
    if args.events == "-":
        events: Iterable[dict] = read_checked_events(sys.stdin)
    else:
        with open(args.events, encoding="utf-8") as stream:
            try:
                events = list(read_checked_events(stream))
            except ValueError as exc:
                raise ValueError(f"{args.events}, {exc} (nothing was sent)") from None
    with SessionClient(
        args.url, args.protocol, args.model, args.timeout, tls_from_args(args)
    ) as client:
        for event, ranking in client.replay(correlation_id, events):
            print(json.dumps({"item_id": event["item_id"]} | ranking.as_dict()), flush=True)
    return 0
