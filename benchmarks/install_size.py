"""What the install holds: the runtime packages ``dstg-interp`` pulls in (its requirements, followed through theirs,
extras left out), their size on disk in this environment, and what one requirement brings that nothing else
needs (default: transformer-lens, of which the toolkit uses the hook classes ``HookPoint`` and
``HookedRootModule``).

    python benchmarks/install_size.py                      # in the environment `pip install -e .` made
    python benchmarks/install_size.py --only-through torch
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import os

from packaging.requirements import Requirement


def canonical(name: str) -> str:
    return name.lower().replace("_", "-")


def requirements(distributions: dict, name: str) -> list[str]:
    """The runtime requirements of ``name`` (no extras) that apply on this machine."""
    found = distributions.get(name)
    names = []
    for text in (found.requires or []) if found else []:
        requirement = Requirement(text)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            names.append(canonical(requirement.name))
    return names


def closure(distributions: dict, roots: list[str]) -> set[str]:
    seen: set[str] = set()
    stack = list(roots)
    while stack:
        name = stack.pop()
        if name not in seen:
            seen.add(name)
            stack.extend(requirements(distributions, name))
    return seen


def disk_bytes(distribution) -> int:
    total = 0
    for file in distribution.files or []:
        try:
            total += os.path.getsize(distribution.locate_file(file))
        except OSError:
            pass
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--project", default="dstg-interp")
    parser.add_argument("--only-through", default="transformer-lens", help="a requirement of the project")
    args = parser.parse_args()
    distributions = {canonical(d.metadata["Name"]): d for d in metadata.distributions()}
    if args.project not in distributions:
        raise SystemExit(f"{args.project} is not installed here: pip install -e . first")
    direct = requirements(distributions, args.project)
    everything = {n for n in closure(distributions, direct) if n in distributions}
    without = closure(distributions, [n for n in direct if n != canonical(args.only_through)])
    only = sorted(everything - without, key=lambda n: -disk_bytes(distributions[n]))
    size = {n: disk_bytes(distributions[n]) for n in everything}
    print(f"{args.project}: {len(everything)} runtime packages, {sum(size.values()) / 2**30:.2f} GiB on disk")
    print(f"only through {args.only_through}: {len(only)} packages, {sum(size[n] for n in only) / 2**20:.0f} MiB")
    for name in only:
        print(f"  {name:40s} {size[name] / 2**20:7.1f} MiB")
    largest = sorted(everything, key=lambda n: -size[n])[:5]
    print("largest: " + ", ".join(f"{n} {size[n] / 2**20:.0f} MiB" for n in largest))


if __name__ == "__main__":
    main()
