"""``python -m benchmarks.pipelines``: :mod:`benchmarks.pipelines.run`."""

import sys

from benchmarks.pipelines.run import main

sys.exit(main())
