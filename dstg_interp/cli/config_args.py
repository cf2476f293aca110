"""Configs make the commands: one ``--flag`` per field of a config dataclass, and the config back from the flags.

    @dataclass
    class CacheCommand(ConfigIO):
        out: str | None = out_field(required=True, help="the store folder to create")   # a shared flag
        layers: LayerSelection = layers_field(shown="all")                              # a shared flag
        batch_size: int = field(default=32, metadata={"min": 1})
        extraction: ExtractionConfig = field(default_factory=ExtractionConfig)   # nested: its fields are flags too

    parser = argparse.ArgumentParser(prog="dstg-cache")
    add_config_arguments(parser, CacheCommand)          # --out, --layers, --batch-size, --dtype, ...
    command = config_from_args(CacheCommand, parser.parse_args(argv))
    main = lambda argv=None: run_command(parser, CacheCommand, run, argv)   # every command's main

A field is written once, in its dataclass: its type, default and help (``metadata["help"]``) make its flag.
Every flag parses to None when it is not given, so ``config_from_args`` keeps the dataclass's default (or the
value of a ``base`` dict, e.g. a saved ``train_config.json``) for it.  Field metadata, all optional:

    help       what the flag means ("(default: ...)" is added from the field's default)
    flag       the flag's name (default: ``--`` + the field name with dashes); ``aliases``: more names
    cli        False: no flag for this field (set in Python or derived)
    min        1 or 0 for an int / > 0 for a float: the shared argparse types of ``flags``, one-line errors
    seed       an int read as a seed (``flags.seed_int``: 0..MAX_SEED)
    choices    the allowed values; ``metavar``, ``required`` as in argparse
    invert     a bool field set False by a store_true flag (``progress`` <- ``--quiet``, ``windows`` <- ``--no-windows``)
    negatable  a bool field with ``--x`` / ``--no-x`` (argparse.BooleanOptionalAction)
    csv        a tuple field read from one comma-separated value (``--names a,b``) instead of several words
    positional an argument without a flag (``dstg-convert SRC OUT``); nargs: how many (``dstg-verify STORE...``)
    repeatable a list flag that may be given several times, each adding to the list (as --model)
    exclusive  (group, required): the flags of one group exclude each other; with True one of them is needed
    shown      the default as --help shows it, where the field's default is None or not the whole story
    parse      the argparse type of a field whose values have a grammar of their own (``--seeds 0,1``)
    shared     set by the field helpers of ``dstg_interp.config``: the field is that shared flag (below)

On a nested config field: ``prefix`` starts the help of each of its flags (``--task holmes: ``), and
``overrides`` makes its value the dict of the flags given, which the outer config lays over a base of its
own (dstg-train: a saved ``train_config.json``).  A class attribute ``FLAGS_LEFT_OUT`` names inherited
fields a config does not offer on its command line.

The shared flags (``--out``, ``--device``, ``--seed``, ``--threads``, ``--layers``, ``--subspaces``,
``--quiet``, ``--model``) keep the words of ``flags.HELP``: a field made by one of the field helpers of
``dstg_interp.config`` (``layers: LayerSelection = layers_field(shown="all")``, ``out_field``, ...) is
added by the ``flags.add_*`` function of its kind (``SHARED``), with the field's help as its ``what``.
A field that merely has one of those names is an ordinary flag of its type.

Every command's ``main`` is ``run_command(build_parser(), XCommand, run, argv)``; the experiment scripts
build their command lines with the same ``add_config_arguments`` (``experiments.figure_inputs.parse_config``).
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import dstg_interp

from dstg_interp.config import SHARED_FLAGS
from dstg_interp.model.files import tokenizer_mismatch_allowed

from . import flags
from .shell import run_cli

__all__ = ["add_config_arguments", "config_from_args", "config_flags", "flag_values", "parse_config", "run_command",
           "SHARED"]

_MISSING = dataclasses.MISSING


def _default(spec: dataclasses.Field) -> Any:
    if spec.default is not _MISSING:
        return spec.default
    if spec.default_factory is not _MISSING:
        return spec.default_factory()
    return None


def _unwrap(hint) -> tuple[Any, bool]:
    """(X, True) for ``X | None``, else (hint, False)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return (args[0] if len(args) == 1 else hint), True
    return hint, False


def _is_config(hint) -> bool:
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


def _offered(config_class, spec: dataclasses.Field) -> bool:
    """Whether a field has a flag: not ``cli=False``, nor left out by its class (``FLAGS_LEFT_OUT``, the
    fields a script's config inherits but does not offer)."""
    return spec.metadata.get("cli", True) is not False and spec.name not in getattr(config_class, "FLAGS_LEFT_OUT", ())


def config_flags(config_class) -> list[tuple[str, str, dataclasses.Field, Any]]:
    """(path, dest, field, type hint) of every flag ``config_class`` makes; ``path`` is the field's dotted
    name through nested configs (``extraction.dtype``), ``dest`` its argparse destination."""
    found = []
    hints = typing.get_type_hints(config_class)
    for spec in dataclasses.fields(config_class):
        if not _offered(config_class, spec):
            continue
        hint = hints[spec.name]
        if _is_config(_unwrap(hint)[0]):
            found += [(f"{spec.name}.{path}", dest, sub, sub_hint)
                      for path, dest, sub, sub_hint in config_flags(_unwrap(hint)[0])]
            continue
        flag = spec.metadata.get("flag", "--" + spec.name.replace("_", "-"))
        found.append((spec.name, flag.lstrip("-").replace("-", "_"), spec, hint))
    return found


def _value_type(element, meta: typing.Mapping):
    if meta.get("seed"):
        return flags.seed_int
    minimum = meta.get("min")
    if element is int:
        if minimum is None:
            return int
        return {1: flags.positive_int, 0: flags.non_negative_int}.get(
            minimum, flags.integer_at_least(minimum, f"an integer >= {minimum}"))
    if element is float:
        return {0: flags.non_negative_float}.get(minimum, flags.positive_float) if minimum is not None else float
    return element if element in (str, Path) else str


def _shown(spec: dataclasses.Field) -> Any:
    if "shown" in spec.metadata:
        return spec.metadata["shown"]
    default = _default(spec)
    if isinstance(default, (list, tuple)):
        return " ".join(map(str, default)) if default else None
    if isinstance(default, Path) and default.is_absolute():  # the package's own folders, not this machine's path
        return package_relative(default)
    return default


def package_relative(path: Path) -> str:
    """An absolute default shown in ``--help`` as the installed package sees it (``<dstg_interp>/zoo``), or
    relative to the working folder, never as one machine's absolute path."""
    package = Path(dstg_interp.__file__).resolve().parent
    for anchor, label in ((package, "<dstg_interp>"), (package.parent, "<checkout>"), (Path.cwd(), ".")):
        if path.is_relative_to(anchor):
            return f"{label}/{path.relative_to(anchor)}"
    return path.name


# The shared flags, by the kind a field helper of dstg_interp.config gives its field: (parser, field
# metadata, the default as --help shows it) -> the flag, with flags.HELP's words.
SHARED: dict[str, Callable[[Any, typing.Mapping, Any], None]] = {
    "out": lambda parser, meta, shown: flags.add_out(parser, required=meta.get("required", False),
                                                     what=meta.get("help"), shown=shown),
    "device": lambda parser, meta, shown: flags.add_device(parser, default=None, shown=shown, what=meta.get("help", "")),
    "seed": lambda parser, meta, shown: flags.add_seed(parser, default=None, shown=shown),
    "threads": lambda parser, meta, shown: flags.add_threads(parser, default=None, shown=shown),
    "layers": lambda parser, meta, shown: flags.add_layers(parser, default=shown),
    "subspaces": lambda parser, meta, shown: flags.add_subspaces(parser, default=shown),
    "quiet": lambda parser, meta, shown: flags.add_quiet(parser),
    "model": lambda parser, meta, shown: flags.add_model(parser, required=meta.get("required", False),
                                                         default=meta.get("model_default")),
}
assert set(SHARED) == set(SHARED_FLAGS)


def add_config_arguments(parser: argparse.ArgumentParser, config_class, prefix: str = "") -> None:
    """One flag per field of ``config_class`` (and of the configs nested in it); every flag's value is None
    when it is not given.  ``prefix`` starts each help text (``--task holmes: ``)."""
    groups: dict[str, Any] = {}
    for path, dest, spec, hint in config_flags(config_class):
        meta = spec.metadata
        flag = meta.get("flag", "--" + spec.name.replace("_", "-"))
        target = parser
        if "exclusive" in meta:  # (group name, one of them required)
            name, required = meta["exclusive"]
            if name not in groups:
                groups[name] = parser.add_mutually_exclusive_group(required=required)
            target = groups[name]
        text = (prefix + _nested_prefix(config_class, path) + meta.get("help", "")).replace("%", "%%")  # argparse: %
        if meta.get("positional"):
            target.add_argument(spec.name, metavar=meta.get("metavar"), help=text or None,
                                **({"nargs": meta["nargs"]} if "nargs" in meta else {}))
            continue
        if "shared" in meta:
            SHARED[meta["shared"]](target, meta, _shown(spec))
            continue
        element, _ = _unwrap(hint)
        shown = _shown(spec)
        shown = shown.replace("%", "%%") if isinstance(shown, str) else shown
        names = [flag, *meta.get("aliases", ())]
        common: dict[str, Any] = dict(dest=dest, default=None)
        if element is bool and (meta.get("invert") or not meta.get("negatable")):
            target.add_argument(*names, action="store_true", help=text or None, **common)
            continue
        if element is bool:
            suffix = f" (default: {shown})" if shown is not None else ""
            target.add_argument(*names, action=argparse.BooleanOptionalAction, help=(text + suffix) or None, **common)
            continue
        suffix = f" (default: {shown})" if shown is not None and not meta.get("required") else ""
        options = dict(help=(text + suffix).strip() or None, metavar=meta.get("metavar"),
                       choices=meta.get("choices"), required=meta.get("required", False), **common)
        if typing.get_origin(element) in (list, tuple):
            item = typing.get_args(element)[0] if typing.get_args(element) else str
            if meta.get("csv"):
                options["type"] = _csv(_value_type(item, meta))
            else:
                options.update(type=_value_type(item, meta), nargs="+")
                if meta.get("repeatable"):
                    options["action"] = "extend"
        else:
            options["type"] = meta.get("parse", _value_type(element, meta))
        target.add_argument(*names, **{k: v for k, v in options.items() if v is not None or k == "default"})


def _nested_prefix(config_class, path: str) -> str:
    """The ``prefix`` metadata of the nested config fields on ``path`` (``holmes.benchmark``: the
    ``holmes`` field's), which starts the help of every flag inside them."""
    prefix, hints = "", typing.get_type_hints(config_class)
    for name in path.split(".")[:-1]:
        spec = next(f for f in dataclasses.fields(config_class) if f.name == name)
        prefix += spec.metadata.get("prefix", "")
        config_class = _unwrap(hints[name])[0]
        hints = typing.get_type_hints(config_class)
    return prefix


def _csv(item_type):
    def parse(text: str) -> tuple:
        return tuple(item_type(part.strip()) for part in str(text).split(",") if part.strip())
    parse.__name__ = "comma-separated list"
    return parse


def config_from_args(config_class, args: argparse.Namespace, base: dict | None = None):
    """``config_class`` from parsed flags: each given flag overrides ``base`` (a dict of the class's fields,
    e.g. a saved config), which overrides the class's defaults; nested configs are built the same way."""
    return config_class(**_values(config_class, args, dict(base or {})))


def _values(config_class, args: argparse.Namespace, values: dict) -> dict:
    hints = typing.get_type_hints(config_class)
    for spec in dataclasses.fields(config_class):
        if not _offered(config_class, spec):
            continue
        element, _ = _unwrap(hints[spec.name])
        if _is_config(element) and spec.metadata.get("overrides"):  # the given flags only: the outer config
            values[spec.name] = _values(element, args, {})         # lays them over a base of its own
            continue
        if _is_config(element):
            nested = values.get(spec.name)
            nested = dataclasses.asdict(nested) if dataclasses.is_dataclass(nested) else dict(nested or {})  # type: ignore[arg-type]
            values[spec.name] = element(**_values(element, args, nested))
            continue
        flag = spec.metadata.get("flag", "--" + spec.name.replace("_", "-"))
        value = getattr(args, flag.lstrip("-").replace("-", "_"), None)
        if spec.metadata.get("shared") == "model":
            value = flags.models(args) or None
        if value is None or (element is bool and spec.metadata.get("invert") and value is False):
            continue
        values[spec.name] = (not value) if spec.metadata.get("invert") else value
    return values


def flag_values(config) -> dict:
    """{flag destination: value} of a config (nested ones too), as its flags would have set them
    (``quiet`` = not ``progress``): the command line a run actually used, for its saved record."""
    found = {}
    for spec in dataclasses.fields(config):
        if not _offered(type(config), spec):
            continue
        value = getattr(config, spec.name)
        if dataclasses.is_dataclass(value):
            found.update(flag_values(value))
            continue
        flag = spec.metadata.get("flag", "--" + spec.name.replace("_", "-"))
        found[flag.lstrip("-").replace("-", "_")] = (not value) if spec.metadata.get("invert") else value
    return found


def run_command(parser: argparse.ArgumentParser, config_class, body: Callable[[Any], int | None], argv=None,
                interrupted: Callable[[Any], str] | None = None) -> int:
    """A command's ``main``: parse ``argv``, build ``config_class`` from the flags and run ``body(config)``
    under ``shell.run_cli`` as ``parser.prog`` (one-line errors, exit codes 2 / 130 / 143).
    ``interrupted(config)`` says what an interruption left behind (``config`` is None when it came before
    the config was made).  A command with subcommands gives ``{subcommand: config class}``; the parser's
    subparsers then store the subcommand's name as ``command``.

        def main(argv=None) -> int:
            return run_command(build_parser(), CacheCommand, run, argv, interrupted=lambda _: "no store was written")
    """
    args = parser.parse_args(argv)
    made: list = []

    def run() -> int | None:
        made.append(parse_config(config_class, args))
        with tokenizer_mismatch_allowed(getattr(made[0], "allow_tokenizer_mismatch", False)):
            return body(made[0])

    said = None if interrupted is None else lambda: interrupted(made[0] if made else None)
    return run_cli(parser.prog, run, interrupted=said)


def parse_config(config_class, args: argparse.Namespace):
    """The config of parsed flags: ``config_class``, or the class of the subcommand given
    (``{subcommand: config class}``, the subcommand's name in ``args.command``)."""
    if isinstance(config_class, Mapping):
        config_class = config_class[args.command]
    return config_from_args(config_class, args)
