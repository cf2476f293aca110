"""The dstg-* commands, one module each, and nothing else: the library below never imports this package.

    train.py    dstg-train     MLM pretraining (dstg_interp.train)
    cache.py    dstg-cache     an activation store (dstg_interp.store)
    probe.py    dstg-probe     position or Holmes probes of one or more models, as one table (probes)
    holmes.py   dstg-holmes    build the offline Holmes suite, or run a Holmes-format folder (probes.holmes)
    extend.py   dstg-extend    a longer AP table (dstg_interp.analysis.extrapolate)
    convert.py  dstg-convert   another author's checkpoint in our format (dstg_interp.model.convert)
    eval.py     dstg-eval      masked-token accuracy against the no-context baseline (dstg_interp.evaluation)
    erase.py    dstg-erase     position erased inside the forward pass: what the model loses (probes.erasure_effects)
    export.py   dstg-export    a store as a Hugging Face datasets folder (dstg_interp.store.export)
    launch.py   dstg-launch    torchrun for dstg-cache / dstg-train; Ctrl-C and failed ranks end in one line

Shared pieces: ``shell.py`` (exit codes, signals, one-line errors: ``run_cli``), ``flags.py`` (the flags
every command shares, the argparse types) and ``config_args.py`` (a config dataclass's flags, and
``run_command``, every command's ``main``).  ``entry.py`` is what pyproject.toml's scripts call: it takes
over Ctrl-C before a command's heavy imports start, and answers a plain ``--help`` from the texts in ``help/``
(``help_text.py``) without them.  ``COMMANDS`` below is the one table of commands.  Each module runs as ``python -m`` too
(``torchrun --nproc_per_node 2 -m dstg_interp.cli.train ...``; ``dstg-launch --nproc-per-node 2 dstg-train ...``
is the same with a clean end).
"""

COMMANDS = {  # one module per command, in this folder; entry.py and launch.py read this table
    "dstg-train": "dstg_interp.cli.train",
    "dstg-cache": "dstg_interp.cli.cache",
    "dstg-probe": "dstg_interp.cli.probe",
    "dstg-holmes": "dstg_interp.cli.holmes",
    "dstg-extend": "dstg_interp.cli.extend",
    "dstg-convert": "dstg_interp.cli.convert",
    "dstg-eval": "dstg_interp.cli.eval",
    "dstg-erase": "dstg_interp.cli.erase",
    "dstg-export": "dstg_interp.cli.export",
    "dstg-verify": "dstg_interp.cli.verify",
    "dstg-launch": "dstg_interp.cli.launch",  # torchrun for the commands above
}
