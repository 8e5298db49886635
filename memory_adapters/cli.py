"""The ``memory-adapters`` command: ``plugins``, ``migrate`` and ``--version``."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Sequence
from importlib import metadata
from typing import Any

from .errors import MemoryAdaptersError
from .plugins import PluginManager

DISTRIBUTION = "memory-adapters"


def version() -> str:
    """The installed version of memory-adapters (``"unknown"`` when run from a bare checkout)."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


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


def _option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` of ``--option``: the value as JSON when it parses, else as a string."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, not {text!r}")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def _migrate(args: argparse.Namespace) -> int:
    from .memory import Memory

    options = dict(args.option)
    with Memory(args.url, store_options=options) as memory:
        store = memory.store
        migrate = getattr(store, "migrate", None)
        done = migrate() if callable(migrate) else None
    at = f" (schema version {done})" if isinstance(done, int) else ""
    print(f"{type(store).__name__}: the tables are ready{at}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memory-adapters", description="Durable memory for pydantic-ai and LangChain agents."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plugins", help="print the installed plugins and their hooks as JSON")
    p.add_argument("--stores", action="store_true", help="print only the store URL schemes")
    p.set_defaults(func=_plugins)
    m = sub.add_parser(
        "migrate",
        help="create or upgrade a store's tables (as a role allowed to), then exit",
        description="Open the store at URL, which creates or upgrades its tables, and exit. "
        "Run it once as a role that may create them, so that applications can open the store "
        'with store_options={"migrate": False}.',
    )
    m.add_argument("url", metavar="URL", help="the store URL, as given to Memory(url)")
    m.add_argument(
        "-o",
        "--option",
        type=_option,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help='a store option, as in Memory(url, store_options={...}) (e.g. -o schema="memory")',
    )
    m.set_defaults(func=_migrate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``memory-adapters`` command."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        result: int = args.func(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`memory-adapters plugins | head`): stop quietly, as a command
        # killed by SIGPIPE would, and keep the interpreter's last flush from failing too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except MemoryAdaptersError as exc:
        parser.exit(1, f"{parser.prog} {args.command}: {type(exc).__name__}: {exc}\n")
    return result


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
