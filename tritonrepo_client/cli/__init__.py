"""The ``tritonrepo-client`` command line: data-plane commands (main), control (control), key
handling (serving).
"""

from tritonrepo_client.cli.app import main

__all__ = ["main"]
