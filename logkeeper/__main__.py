"""``python -m logkeeper``: the console script."""

import sys

from logkeeper.cli import main

sys.exit(main())
