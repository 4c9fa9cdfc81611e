"""``python -m fastdist_lab`` runs the CLI."""

import sys

from .cli import main

sys.exit(main())
