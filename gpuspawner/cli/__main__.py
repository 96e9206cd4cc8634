"""``python -m gpuspawner.cli``: the ``gpuhub`` command."""
import sys

from .main import main

sys.exit(main())
