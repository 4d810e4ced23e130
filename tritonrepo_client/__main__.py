"""``python -m tritonrepo_client`` = ``tritonrepo-client``."""

import sys

from tritonrepo_client.cli.app import main

sys.exit(main())
