import sys

from broker.startup import main

sys.exit(main())
