"""`python -m mxcc` = the `mxcc` command."""
import sys

from mxcc.cli import main

sys.exit(main())
