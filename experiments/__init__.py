"""The experiments: thin scripts, one per figure or table of figures/, each taking its config whole.

    python -m experiments.run_all            # from the repository root: the whole gallery
    python -m experiments.fig_probes --help  # one script; its flags are its config's fields
"""
