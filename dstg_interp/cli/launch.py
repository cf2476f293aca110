"""dstg-launch: torchrun for the dstg-* commands, with their promise kept to the end (one line, exit 2 / 130 / 143).

    dstg-launch --nproc-per-node 2 dstg-cache --model dstg --corpus en-mix --out stores/dstg
    dstg-launch --nproc-per-node 2 dstg-train --variant dstg --out runs/dstg-ddp
    dstg-launch --nproc-per-node 2 my_script.py ...          # any script torchrun runs (or -m MODULE)
    python -m dstg_interp.cli.launch ...                      # the same

Every torchrun flag is accepted as torchrun reads it (this is ``torch.distributed.run`` with its own
parser); a first argument naming a dstg-* command starts each rank as that command (``python -m
dstg_interp.cli.entry dstg-cache ...``).  What changes is the launcher's own end: torchrun answers Ctrl-C
with a ``SignalException`` traceback and a failed rank with a ``ChildFailedError`` table, after the
ranks have printed their own one line each.  Here the ranks are stopped the same way (torchrun forwards
the signal and waits ``--shutdown-timeout`` seconds for their cleanup), and the launcher adds one line:

    dstg-launch: interrupted (Ctrl-C): the 2 ranks of dstg-cache were stopped (their lines are above)   exit 130
    dstg-launch: dstg-cache failed: rank 0 exit code 2, rank 1 killed by SIGKILL (...)                   exit 2

torchrun's agent logging (its OMP_NUM_THREADS notice, the shutdown and failure reports) is silenced
unless ``LOGLEVEL`` is set (``LOGLEVEL=INFO dstg-launch ...`` shows all of it).  A second Ctrl-C while
the ranks clean up is held: the cleanup the first one started is not cut short (the agent still
SIGKILLs a rank that outlives ``--shutdown-timeout``).  Plain ``torchrun`` keeps working the same way
for the ranks; only its own traceback remains.

Waiting for the other nodes (``--nnodes 2`` ...) is bounded and answers Ctrl-C at once: the rendezvous
times out after RENDEZVOUS_TIMEOUT_S (300) seconds unless ``--rdzv-conf timeout=SECONDS`` (static rendezvous) or
``join_timeout=SECONDS`` (c10d) says otherwise (torchrun's own defaults are 900 and 600 s), and a Ctrl-C or SIGTERM while it waits -- inside torch's C++ store, where Python's
handlers do not run -- ends the launcher in one line at once (``dstg_interp.io.SignalWatch``; round 4, L11).
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
from pathlib import Path

from dstg_interp.cli import COMMANDS
from dstg_interp.cli.shell import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_TERMINATED, Terminated
from dstg_interp.io import SignalWatch

PROG = "dstg-launch"
DISTRIBUTED = ("dstg-cache", "dstg-train", "dstg-probe")  # the commands whose ranks share the work (the others would run twice)
SIGNAL_EXITS = {signal.SIGINT: EXIT_INTERRUPTED, signal.SIGTERM: EXIT_TERMINATED}
SIGNAL_NAMES = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}
RENDEZVOUS_TIMEOUT_S = 300  # waiting for the other nodes; torchrun's own default is 900


def _import_torchrun():
    """torch.distributed.run and the exceptions its agent ends with; its loggers quiet unless LOGLEVEL is set.
    Imported here, not at the top: torch's elastic loggers take their level from LOGLEVEL when they are made."""
    quiet = "LOGLEVEL" not in os.environ
    if quiet:
        os.environ["LOGLEVEL"] = "CRITICAL"
    try:
        from torch.distributed import run as torchrun
        from torch.distributed.elastic.multiprocessing import api as multiprocessing_api
        from torch.distributed.elastic.multiprocessing.api import SignalException
        from torch.distributed.elastic.agent.server.api import SimpleElasticAgent
        from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
        from torch.distributed.elastic.rendezvous.api import RendezvousError
    finally:
        if quiet:
            del os.environ["LOGLEVEL"]  # the ranks log as they would under torchrun
    if quiet:
        for name in list(logging.root.manager.loggerDict):
            if name.startswith("torch.distributed"):
                logging.getLogger(name).setLevel(logging.CRITICAL)
    _hold_repeated_signals(multiprocessing_api)
    _watch_signals_while_rendezvousing(SimpleElasticAgent)
    return torchrun, SignalException, ChildFailedError, RendezvousError


# Started before torchrun.run (the rendezvous handler may connect to a store first), stopped when a rendezvous
# ends -- before any rank starts, which would inherit the blocked signals -- and started again for a restart's.
WAITING = SignalWatch(f"{PROG}: interrupted ({{how}}) while waiting for the other nodes (no rank was started)")


def _watch_signals_while_rendezvousing(agent_class) -> None:
    rendezvous = agent_class._rendezvous

    def watched(self, worker_group):
        WAITING.start()
        try:
            return rendezvous(self, worker_group)
        finally:
            WAITING.stop()

    agent_class._rendezvous = watched


def _hold_repeated_signals(multiprocessing_api) -> None:
    """The agent's signal handler raises SignalException on every signal, so a second Ctrl-C while the ranks
    clean up escaped from the middle of the shutdown (ranks left running).  Raise once; hold the rest."""
    raise_signal = multiprocessing_api._terminate_process_handler
    seen: list[int] = []

    def once(signum, frame):
        if seen:
            return
        seen.append(signum)
        raise_signal(signum, frame)

    multiprocessing_api._terminate_process_handler = once  # PContext.start installs it by this name


def parse(argv, torchrun):
    """torchrun's own parser under our name; a dstg-* command as the script becomes ``-m dstg_interp.cli.entry CMD``."""
    parser = torchrun.get_args_parser()
    parser.prog = PROG
    parser.description = ("torchrun for the dstg-* commands: every torchrun flag, then a dstg-* command (or a "
                          "script) and its arguments; Ctrl-C and failed ranks end in one line")
    args = parser.parse_args(argv)
    if str(args.nproc_per_node).lstrip("-").isdigit() and int(args.nproc_per_node) < 1:  # torch: an AssertionError (L5)
        parser.error(f"--nproc-per-node: expected a positive number of ranks (or auto, cpu, gpu), got {args.nproc_per_node}")
    if str(args.nnodes) != "1":  # waiting for other nodes: bounded (static: timeout, c10d: join_timeout; L11)
        given = {item.split("=", 1)[0].strip() for item in (args.rdzv_conf or "").split(",") if item}
        bounds = [f"{key}={RENDEZVOUS_TIMEOUT_S}" for key in ("timeout", "join_timeout") if key not in given]
        args.rdzv_conf = ",".join(filter(None, [args.rdzv_conf, *bounds]))
    script = args.training_script
    if script in COMMANDS and not (args.module or args.no_python or Path(script).exists()):
        if script not in DISTRIBUTED:
            parser.error(f"{script} does not share its work between ranks (each would run it whole): run it "
                         f"without {PROG}; {' and '.join(DISTRIBUTED)} do")
        # the command's own flags are read here once: a typo is one usage and one line, not one per rank
        importlib.import_module(COMMANDS[script]).build_parser().parse_args(args.training_script_args)
        args.module, args.training_script = True, "dstg_interp.cli.entry"
        args.training_script_args = [script, *args.training_script_args]
    elif script.startswith("dstg-") and not (args.module or args.no_python or Path(script).exists()):
        parser.error(f"{script!r} is not a dstg-* command that runs under torchrun ({', '.join(DISTRIBUTED)}) "
                     "nor a script; check the name")
    return args, script


def _failure_line(name: str, failures: dict) -> str:
    def how(failure) -> str:
        if failure.exitcode < 0:
            return f"killed by {failure.signal_name()}"
        meaning = {EXIT_ERROR: "", EXIT_INTERRUPTED: " (Ctrl-C)", EXIT_TERMINATED: " (SIGTERM)"}
        return f"exit code {failure.exitcode}{meaning.get(failure.exitcode, '')}"

    ranks = ", ".join(f"rank {rank} {how(failures[rank])}" for rank in sorted(failures))
    return f"{PROG}: {name} failed: {ranks} (each rank's own message is above)"


def _failure_code(failures: dict) -> int:
    """The ranks' own code when they agree on an interruption (130 / 143), else 2 (an error, a killed rank)."""
    codes = {failure.exitcode for failure in failures.values()}
    return codes.pop() if len(codes) == 1 and codes <= {EXIT_INTERRUPTED, EXIT_TERMINATED} else EXIT_ERROR


def main(argv=None) -> int:
    try:
        torchrun, SignalException, ChildFailedError, RendezvousError = _import_torchrun()
        args, name = parse(argv, torchrun)
    except KeyboardInterrupt as err:  # SIGTERM is Terminated here (dstg_interp.cli.entry installs it)
        terminated = isinstance(err, Terminated)
        print(f"{PROG}: interrupted ({'SIGTERM' if terminated else 'Ctrl-C'}) while starting; no rank was started",
              file=sys.stderr)
        return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED
    workers = f"the {args.nproc_per_node} rank(s) of {name}" if str(args.nproc_per_node).isdigit() else f"the ranks of {name}"
    try:
        WAITING.start()
        torchrun.run(args)
    except SignalException as err:
        _ignore_signals()
        how = SIGNAL_NAMES.get(err.sigval, signal.Signals(err.sigval).name)
        print(f"{PROG}: interrupted ({how}): {workers} were stopped (their own lines, if any, are above)",
              file=sys.stderr)
        return SIGNAL_EXITS.get(err.sigval, 128 + int(err.sigval))
    except ChildFailedError as err:
        _ignore_signals()
        print(_failure_line(name, err.failures), file=sys.stderr)
        return _failure_code(err.failures)
    except KeyboardInterrupt as err:  # before the agent took the signals over (rendezvous)
        _ignore_signals()
        terminated = isinstance(err, Terminated)
        print(f"{PROG}: interrupted ({'SIGTERM' if terminated else 'Ctrl-C'}) while starting {workers}",
              file=sys.stderr)
        return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED
    except (RendezvousError, RuntimeError, ValueError) as err:  # torch's DistNetworkError is a RuntimeError
        text = (str(err).strip().splitlines() or [type(err).__name__])[0]
        print(f"{PROG}: error: torchrun could not run {name}: {text} ({type(err).__name__}); "
              "LOGLEVEL=INFO shows the launcher's log", file=sys.stderr)
        return EXIT_ERROR
    finally:
        WAITING.stop()
    return 0


def _ignore_signals() -> None:
    """The outcome is decided and being printed: a late signal must not turn it into a traceback."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)


if __name__ == "__main__":
    sys.exit(main())
