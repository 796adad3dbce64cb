"""``python -m guitrainer`` opens the app."""

import sys

from guitrainer.app import main

sys.exit(main())
