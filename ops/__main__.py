from __future__ import annotations

import sys

from ops.cli import main

sys.exit(main())
