"""`python -m aichor_iac.cli`: the same as `aichor-iac`."""

import sys

from . import command

sys.exit(command())
