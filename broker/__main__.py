"""`python -m broker`: start a broker (broker/startup.py)."""

import sys

from broker.startup import main

sys.exit(main())
