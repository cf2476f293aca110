"""`python -m probes.holmes build --out DIR` / `python -m probes.holmes run --benchmark DIR --model dstg` (= dstg-holmes)."""

import sys

from probes.holmes.run import main

sys.exit(main())
