"""``python -m examples.semantic_search [--host H] [--port P] [--documents FILE]``: run the
service with uvicorn (Triton's address and the rest from the environment, see ``app.py``)."""

from __future__ import annotations

import argparse
import os

import uvicorn


def main(argv: list[str] | None = None) -> None:
    """Parse the command line and serve until Ctrl-C / SIGTERM."""
    parser = argparse.ArgumentParser(prog="python -m examples.semantic_search", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8080, help="port (default: %(default)s)")
    parser.add_argument("--documents", help="JSON-lines documents (sets SEARCH_DOCUMENTS)")
    parser.add_argument("--log-level", default="info", help="uvicorn's (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.documents:
        os.environ["SEARCH_DOCUMENTS"] = args.documents
    # One process, one event loop: the app's client and in-memory matrix are per process.
    uvicorn.run(
        "examples.semantic_search.app:app", host=args.host, port=args.port, log_level=args.log_level
    )


if __name__ == "__main__":
    main()
