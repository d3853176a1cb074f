"""``python -m agentcompass.cli``: the ``agentcompass`` command."""

import sys

from agentcompass.cli import main

sys.exit(main())
