"""``python -m yiemagent``: the command line (see ``yiemagent.cli``)."""

import sys

from .cli import main

sys.exit(main())
