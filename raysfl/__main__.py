import sys

from raysfl.cli import main

sys.exit(main())
