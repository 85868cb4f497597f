"""`python -m dlc ...` runs the command line."""

import sys

from dlc.cli import main

sys.exit(main())
