"""The ``memory-adapters`` command."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from .plugins import PluginManager


def _plugins(args: argparse.Namespace) -> int:
    pm = PluginManager(load_entrypoints=True)
    info = pm.describe()
    if args.stores:
        print(json.dumps(sorted(pm.registries.stores), indent=2))
        return 0
    registries = pm.registries
    for item in info:
        item["stores"] = sorted(s for s, r in registries.stores.items() if r.plugin == item["name"])
        item["adapters"] = [a.name for a, plugin in registries.adapters if plugin == item["name"]]
    print(json.dumps(info, indent=2))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``memory-adapters`` command."""
    parser = argparse.ArgumentParser(
        prog="memory-adapters", description="Durable memory for pydantic-ai and LangChain agents."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plugins", help="print the installed plugins and their hooks as JSON")
    p.add_argument("--stores", action="store_true", help="print only the store URL schemes")
    p.set_defaults(func=_plugins)
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
