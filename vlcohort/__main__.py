import sys

from vlcohort.cli import main

sys.exit(main())
