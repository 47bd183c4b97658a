"""``python -m leakshield`` runs the command line."""

import sys

from leakshield.cli import main

if __name__ == "__main__":  # worker processes (spawn) import this module again
    sys.exit(main())
