"""``python -m benchmarks.gpu``: :mod:`benchmarks.gpu.run`."""

import sys

from benchmarks.gpu.run import main

sys.exit(main())
