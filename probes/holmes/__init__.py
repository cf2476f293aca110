"""Holmes / FlashHolmes probing: the on-disk format, the probe protocol, aggregation, an offline suite.

    from probes.holmes import run_holmes, load_benchmark
    results = run_holmes(["dstg", "rope", "ap", "rp"], "~/.cache/dstg-interp/holmes-suite/v1")
"""

from probes.holmes.aggregate import a_vs_b, area_table, dataset_scores, phenomenon_table, winning_rates
from probes.holmes.encode import encode_dataset
from probes.holmes.format import (HolmesConfig, HolmesDataset, HolmesFormatError, HolmesRow, SkippedDataset,
                                  Target, TaskType, load_benchmark, load_dataset, write_dataset)
from probes.holmes.protocol import HolmesProbe, HolmesProbeConfig, evaluate_features, online_code_length
from probes.holmes.registry import AREAS, DATASETS, PHENOMENA, area_of, phenomenon_of, register_dataset
from probes.holmes.run import HolmesRunConfig, run_holmes, summary_tables, write_tables
