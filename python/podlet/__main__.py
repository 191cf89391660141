"""``python -m podlet ...`` is the ``podlet`` command (podlet.cli)."""
import sys

from podlet.cli import main

sys.exit(main())
