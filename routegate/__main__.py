"""``python -m routegate``: the same as the ``routegate`` command."""

import sys

from routegate.cli import main

sys.exit(main())
