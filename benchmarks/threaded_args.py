"""The command line of a benchmark that runs on ``--threads`` PyTorch CPU threads (bench_models, bench_training,
bench_scaling, bench_store):

    from threaded_args import parse_threaded       # benchmarks are scripts: sibling import
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parse_threaded(parser)                  # + the load flags (machine.py), parsed; torch on --threads
"""

from __future__ import annotations

import argparse

import torch

from machine import add_load_arguments


def parse_threaded(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The load flags (``machine.add_load_arguments``) added last, the command line parsed, and PyTorch set to
    ``--threads`` CPU threads before anything is timed."""
    add_load_arguments(parser)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    return args
