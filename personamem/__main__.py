"""``python -m personamem``: the command line, as the ``personamem`` script runs it."""

import sys

from personamem.cli import main

sys.exit(main())
