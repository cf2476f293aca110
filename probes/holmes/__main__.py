"""`python -m probes.holmes build --out DIR` / `python -m probes.holmes run --holmes-dir DIR --model dstg`."""

import sys

from probes.holmes.run import main

sys.exit(main())
