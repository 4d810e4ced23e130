"""``python -m tritonrepo_client`` = ``tritonrepo-client``."""

import sys

from tritonrepo_client.cli.main import main

sys.exit(main())
