"""``python -m sysmetrics``: the command line (see :mod:`sysmetrics.cli`)."""

import sys

from sysmetrics.cli import main

sys.exit(main())
