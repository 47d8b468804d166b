"""``python -m vifusion.cli``: the same as the ``vifusion`` command."""

import sys

from vifusion.cli.parser import main

sys.exit(main())
