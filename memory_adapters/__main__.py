"""``python -m memory_adapters`` runs the ``memory-adapters`` command."""

import sys

from .cli import main

sys.exit(main())
