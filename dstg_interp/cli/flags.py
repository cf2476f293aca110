"""The flags the dstg-* commands share, defined once: one meaning, one help text, one parser each.

    from dstg_interp.cli import flags
    parser = argparse.ArgumentParser(prog="dstg-cache")
    flags.add_model(parser, required=True)          # --model dstg rope  ==  --model dstg --model rope
    flags.add_layers(parser)                        # --layers 0,3,last | final | all
    flags.add_subspaces(parser); flags.add_quiet(parser); flags.add_device(parser)
    args = parser.parse_args(argv)
    model = flags.one_model(args, "dstg-cache")     # a command that takes one model says so in one line

Every command lists these flags with the words of ``HELP``; where a command has a default, argparse's
help ends with `` (default: ...)`` after those words, and that suffix is the only difference.  Layer
selections follow one grammar everywhere: ``parse_layers`` reads it here, the library's ``Encoder.resolve``
(``dstg_interp.encoders.selection``) turns it into a model's layers.  A config field gets one of these flags
through its field helper (``dstg_interp.config.layers_field`` ...; ``config_args.SHARED``).

Errors in these flags are argparse errors: one line, exit code 2, like every other bad input (see
``dstg_interp.cli.shell.run_cli``: 2 bad input, 130 Ctrl-C, 143 SIGTERM).
"""

from __future__ import annotations

import argparse

from dstg_interp.config import MAX_SEED, check_seed
from dstg_interp.encoders.selection import ALL, FINAL, LAST, SUBSPACES

HELP = {
    "--model": "a zoo name (dstg, rope, ap, rp), a checkpoint or run folder, a local Hugging Face encoder folder or "
               "a hub id (org/name, through the Hugging Face cache); several: --model dstg rope or --model dstg --model rope",
    "--layers": "layers to read: comma-separated indices (0 = embeddings, l = output of the l-th block), 'last' "
                "(the last block's output), 'final' (the normed state the MLM head reads) or 'all'",
    "--subspaces": "comma-separated subspaces: sem, ap, full (DSTG has all three, other models only full)",
    "--quiet": "no progress bars",
    "--device": "where the model runs: cpu, cuda or cuda:N",
    "--seed": "random seed for everything this command draws at random",
    "--out": "where the output is written",
    "--threads": "PyTorch CPU threads",
}


# --- value parsers (argparse types) ---------------------------------------------------------------
def parse_layers(text: str) -> str | tuple:
    """``all``, or a tuple of ints / ``last`` / ``final`` in the order given, each once."""
    parts = [part.strip() for part in str(text).split(",") if part.strip()]
    if parts == [ALL]:
        return ALL
    selection: list[str | int] = []
    for part in parts:
        if part in (LAST, FINAL):
            selection.append(part)
        elif part.isdigit():
            selection.append(int(part))
        else:
            raise argparse.ArgumentTypeError(
                f"expected comma-separated layer indices (0 = embeddings), 'last', 'final' or 'all', got {text!r}")
    if not selection:
        raise argparse.ArgumentTypeError(f"expected at least one layer, got {text!r}")
    if len(set(selection)) != len(selection):
        raise argparse.ArgumentTypeError(f"{text!r} names a layer twice; list each once")
    return tuple(selection)


def parse_subspaces(text: str) -> tuple[str, ...]:
    parts = tuple(part.strip() for part in str(text).split(",") if part.strip())
    bad = [part for part in parts if part not in SUBSPACES]
    if bad or not parts:
        raise argparse.ArgumentTypeError(f"expected comma-separated subspaces from {', '.join(SUBSPACES)}, got {text!r}")
    if len(set(parts)) != len(parts):
        raise argparse.ArgumentTypeError(f"{text!r} names a subspace twice; list each once")
    return parts


def parse_device(text: str) -> str:
    device = str(text).strip()
    if device in ("cpu", "cuda") or (device.startswith("cuda:") and device[5:].isdigit()):
        return device
    raise argparse.ArgumentTypeError(f"expected cpu, cuda or cuda:N, got {text!r}")


def integer_at_least(minimum: int, words: str):
    """An argparse type: an integer >= ``minimum``; argparse prefixes the flag ("argument --threads: ...")."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {words}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {words}, got {value}")
        return value
    return parse


positive_int = integer_at_least(1, "a positive integer")
non_negative_int = integer_at_least(0, "a non-negative integer")


def non_negative_float(text: str) -> float:
    """argparse type: a finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (value >= 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text}")
    return value


def seed_int(text: str) -> int:
    """argparse type: a seed every random generator here accepts (0..MAX_SEED)."""
    try:
        return check_seed(int(text), "expected")
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a seed from 0 to {MAX_SEED}, got {text!r}") from None


# --- the flags ------------------------------------------------------------------------------------
def _help(flag: str, default) -> str:
    return HELP[flag] if default is None else f"{HELP[flag]} (default: {default})"


def add_model(parser, required: bool = False, default: str | None = None):
    """``--model``, repeatable and listable; ``args.model`` is a list (``[default]`` when not given)."""
    parser.add_argument("--model", action="extend", nargs="+", required=required, default=None, metavar="MODEL",
                        help=_help("--model", default))
    if default is not None:
        parser.set_defaults(_model_default=default)


def models(args: argparse.Namespace) -> list[str]:
    """The --model values, in order, each once (the command's default when none was given)."""
    given = args.model or ([args._model_default] if getattr(args, "_model_default", None) else [])
    return list(dict.fromkeys(given))


def one_model(args: argparse.Namespace | list[str], prog: str) -> str:
    """The one --model of a command that takes one (parsed flags or a config's model list); several are one
    clear error (a ValueError: exit 2)."""
    given = models(args) if isinstance(args, argparse.Namespace) else list(dict.fromkeys(args))
    if len(given) != 1:
        raise ValueError(f"{prog} takes one --model, got {len(given)} ({', '.join(given)}); run it once per model")
    return given[0]


def add_layers(parser, default: str | None = None):
    """``--layers``: ``args.layers`` is ``all``, a tuple of ints / ``last`` / ``final``, or None (not given)."""
    parser.add_argument("--layers", type=parse_layers, default=None, metavar="LAYERS", help=_help("--layers", default))


def add_subspaces(parser, default: str | None = "all the model has"):
    parser.add_argument("--subspaces", type=parse_subspaces, default=None, metavar="SUBSPACES",
                        help=_help("--subspaces", default))


def add_quiet(parser):
    parser.add_argument("--quiet", action="store_true", help=HELP["--quiet"])


def add_device(parser, default: str | None = "cpu", shown: str | None = None, what: str = ""):
    help = _help("--device", shown if shown is not None else default)
    parser.add_argument("--device", type=parse_device, default=default, help=help + (f"; {what}" if what else ""))


def add_seed(parser, default: int | None = 0, shown: str | None = None):
    parser.add_argument("--seed", type=seed_int, default=default,
                        help=_help("--seed", shown if shown is not None else default))


def add_out(parser, required: bool = False, default: str | None = None, what: str | None = None,
            shown: str | None = None):
    """``--out``; ``what`` says what the folder (or file) holds, after the shared words."""
    text = HELP["--out"] + (f": {what}" if what else "")
    shown = shown if shown is not None else default
    parser.add_argument("--out", required=required, default=default,
                        help=text if shown is None else f"{text} (default: {shown})")


def add_threads(parser, default: int | None = None, shown: str | None = None):
    shown = shown if shown is not None else ("PyTorch's" if default is None else default)
    parser.add_argument("--threads", type=positive_int, default=default, help=_help("--threads", shown))


class _Renamed(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string} {self.const}")


def add_renamed(parser, old: str, new: str, why: str = "", takes_value: bool = True):
    """An old flag that now errors (exit 2) pointing to ``new``; hidden from --help."""
    note = f"is now {new}" + (f" ({why})" if why else "")
    parser.add_argument(old, action=_Renamed, nargs="?" if takes_value else 0, const=note, default=argparse.SUPPRESS,
                        help=argparse.SUPPRESS)


def shared_help(parser: argparse.ArgumentParser) -> dict[str, str]:
    """{flag: help} of the shared flags a parser (or any of its subcommands) defines; for the tests."""
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.update({f"{name} {flag}": text for flag, text in shared_help(sub).items()})
        for flag in action.option_strings:
            if flag in HELP and action.help != argparse.SUPPRESS:
                found[flag] = action.help
    return found
