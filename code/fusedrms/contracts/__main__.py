"""``python -m fusedrms.contracts``: see :mod:`fusedrms.contracts.command`."""
import sys

from .command import main

sys.exit(main())
