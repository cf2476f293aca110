"""The README's (and its linked docs pages') fenced examples, extracted so a test can run them as written.

    for example in collect():           # README.md, then every page it links (docs/*.md, figures/README.md...)
        example.kind, example.where     # "python" or "shell", "README.md:57"
        example.skip                    # None, or why it cannot run offline (the marker's reason)

Which blocks count: fences tagged ``python``, ``bash``, ``sh`` or ``shell``; other fences (text, yaml, csv)
are data, not examples.  A shell block is a list of commands, one a line (``\\`` continues a line).

Examples the test cannot run carry a marker **in the document**, visible to every reader, on the line (shell)
or as a block's first line (then it covers the whole block):

    hf download org/name --local-dir models/x    # not run offline: downloads from the Hugging Face Hub
    python -m experiments.run_all                # not run in tests: 15 minutes; its --tiny form is tested

``not run offline:`` for what needs a network, ``not run in tests:`` for what is too slow, needs several
processes or a person (the reason then says where it is tested).  A marker without a reason is an error.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# "not run offline:" for what needs a network; "not run in tests:" for what is too slow or needs several
# processes or a person (the reason then says where it is tested instead).
MARKERS = ("not run offline:", "not run in tests:")
LANGUAGES = {"python": "python", "py": "python", "bash": "shell", "sh": "shell", "shell": "shell"}
_FENCE = re.compile(r"^(\s*)```\s*([\w-]*)\s*$")
_DOC_LINK = re.compile(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)")
# Linked pages that are write-ups of results, not manuals: their code (if any) is quoted, not an example.
WRITE_UPS = ("figures/REPORT.md", "figures/claims.md")


@dataclass
class Example:
    path: Path
    line: int  # 1-based line of the example's first code line
    kind: str  # "python" or "shell"
    code: str
    skip: str | None = None

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def marker_reason(text: str) -> str | None:
    """The marker and its reason in ``text`` (a comment), or None without a marker."""
    for marker in MARKERS:
        index = text.find(marker)
        if index >= 0:
            reason = text[index + len(marker):].strip()
            if not reason:
                raise ValueError(f"a {marker!r} marker needs its reason: {text.strip()!r}")
            return f"{marker} {reason}"
    return None


def linked_pages(path: Path) -> list[Path]:
    """The pages of this repository a document links to (relative links to .md files), in order of first
    mention, write-ups excluded."""
    pages = []
    for match in _DOC_LINK.finditer(path.read_text()):
        target = (path.parent / match.group(1)).resolve()
        if (target.is_file() and ROOT in target.parents and target not in pages
                and target.relative_to(ROOT).as_posix() not in WRITE_UPS):
            pages.append(target)
    return pages


def documents() -> list[Path]:
    """README.md and every page of the repository reachable from it through links (docs/, figures/README.md...)."""
    found, queue = [], [ROOT / "README.md"]
    while queue:
        page = queue.pop(0)
        if page in found:
            continue
        found.append(page)
        queue += [linked for linked in linked_pages(page) if linked not in found]
    return found


def fenced_blocks(path: Path) -> list[tuple[int, str, str]]:
    """(first code line, language, code) of every fenced block of ``path``."""
    blocks, lines, open_at, language, body = [], path.read_text().splitlines(), None, "", []
    for number, text in enumerate(lines, start=1):
        match = _FENCE.match(text)
        if open_at is None and match:
            open_at, language, body = number + 1, match.group(2).lower(), []
        elif open_at is not None and text.strip() == "```":
            blocks.append((open_at, language, "\n".join(body) + "\n"))
            open_at = None
        elif open_at is not None:
            body.append(text)
    return blocks


def shell_commands(code: str, first_line: int) -> list[tuple[int, str]]:
    """(line, command) of a shell block: continuation lines joined, blank and comment-only lines dropped."""
    commands, pending, start = [], "", first_line
    for offset, text in enumerate(code.splitlines()):
        if not pending:
            start = first_line + offset
        if text.rstrip().endswith("\\"):
            pending += text.rstrip()[:-1] + " "
            continue
        command = (pending + text).strip()
        pending = ""
        if command and not command.startswith("#"):
            commands.append((start, command))
    return commands


def collect() -> list[Example]:
    """Every example of every document, one per Python block and one per shell command."""
    examples = []
    for path in documents():
        for line, language, code in fenced_blocks(path):
            kind = LANGUAGES.get(language)
            if kind is None:
                continue
            first = code.lstrip().splitlines()[0] if code.strip() else ""
            block_skip = marker_reason(first) if first.startswith("#") else None
            if kind == "python":
                examples.append(Example(path, line, kind, code, block_skip))
                continue
            for command_line, command in shell_commands(code, line):
                examples.append(Example(path, command_line, kind, command, block_skip or marker_reason(command)))
    return examples


def argv_of(command: str) -> list[str]:
    """A shell command as argv, its comment dropped (the examples use no pipes, globs or variables)."""
    return shlex.split(command, comments=True)
