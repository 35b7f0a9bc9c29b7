"""``python -m rlblocks.cli ...`` runs the command line, as the ``rlblocks`` script does."""

import sys

from rlblocks.cli import console_main

if __name__ == "__main__":
    sys.exit(console_main())
