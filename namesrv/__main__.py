import sys

from namesrv.startup import main

sys.exit(main())
