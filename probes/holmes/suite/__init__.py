"""The offline Holmes suite: datasets in exactly the Holmes format, built from registry-fetched sources.

    dstg-holmes build --out ~/.cache/dstg-interp/holmes-suite/v1
    from probes.holmes.suite import build_suite, default_suite_dir, SUITE

This is NOT Holmes data: it re-creates Holmes phenomena from the Brown corpus (gold POS tags), WordNet
and the en-mix corpus, so scores are only comparable with scores on this suite ("Holmes protocol,
offline re-creation"). Built into the cache (the Brown corpus is non-commercial: never commit it).
Deterministic: the same seed and pinned sources give byte-identical files.

The room: ``catalog`` (the table of datasets), ``build`` (writing them), ``builders`` and ``lexical`` (the
per-dataset generators), ``sources`` (the pinned corpora they read).
"""

from __future__ import annotations

from probes.holmes.suite.build import SUITE_FILE, build_suite, default_suite_dir, is_complete_suite, suite_foreign_entries
from probes.holmes.suite.catalog import SUITE, SUITE_VERSION, SuiteDataset

__all__ = ["SUITE", "SuiteDataset", "build_suite", "default_suite_dir", "is_complete_suite", "SUITE_VERSION",
           "SUITE_FILE", "suite_foreign_entries"]
