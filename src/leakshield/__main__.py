"""``python -m leakshield`` runs the command line."""

import sys

from leakshield.cli import main

sys.exit(main())
