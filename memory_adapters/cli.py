"""The ``memory-adapters`` command: what an operator runs against a store.

``--version``, ``plugins``, ``migrate``, ``doctor``, ``stats``, ``conversations``, ``show``,
``export``, ``import``, ``reindex``, ``prune``, ``erase`` and ``mcp``, on Click with rich
(``docs/cli.md``). The store is named by ``--url`` or ``$MEMORY_ADAPTERS_URL``, with
``--option KEY=VALUE`` store options.

Exit codes: 0 done; 1 a failed check or operation (a :class:`~.errors.MemoryAdaptersError` is
printed as one line, ``error: <type>: <message>``, never a traceback); 2 a usage error. Data goes
to stdout (``--json`` where it is data), progress bars and reports of what was done to stderr.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from typing import IO, TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from .errors import MemoryAdaptersError, MissingExtra, Unsupported
from .plugins import PluginManager

if TYPE_CHECKING:
    from .memory import Memory
    from .messages import Message, Record
    from .store import Store

DISTRIBUTION = "memory-adapters"
PROG = "memory-adapters"
ENV_URL = "MEMORY_ADAPTERS_URL"
PAGE = 500
"""Messages read per store call by ``show`` (and conversations per page by ``stats``)."""


def version() -> str:
    """The installed version of memory-adapters (``"unknown"`` when run from a bare checkout)."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


# -- the state the commands share ----------------------------------------------------------------


@dataclass
class Runtime:
    """What the commands run against: the store URL and options, and where progress goes.

    The command builds one from its options. A test (or an application embedding the command)
    may pass its own as Click's ``obj``, with ``memory_factory`` to reach a store no URL can
    name (a MongoDB store around an in-process client) and ``stderr`` to record the progress
    bars (``Console(record=True)``).
    """

    url: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    memory_factory: Callable[..., Memory] | None = None
    """Called with ``Memory``'s keyword options (``embed=...``) instead of opening ``url``."""
    stderr: Console | None = None

    def memory(self, **kwargs: Any) -> Memory:
        """A ``Memory`` over the store; ``kwargs`` are ``Memory``'s options."""
        if self.memory_factory is not None:
            return self.memory_factory(**kwargs)
        if not self.url:
            raise click.UsageError(
                f"no store URL: give --url URL or set {ENV_URL} (for example sqlite:///memory.db)"
            )
        from .memory import Memory

        return Memory(self.url, store_options=dict(self.options), **kwargs)

    def err(self) -> Console:
        """The console of progress bars and reports (stderr)."""
        if self.stderr is None:
            self.stderr = Console(stderr=True)
        return self.stderr


def _runtime(ctx: click.Context) -> Runtime:
    obj = ctx.find_object(Runtime)
    assert obj is not None  # the group's callback always sets one
    return obj


def _option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` of ``--option``: the value as JSON when it parses, else as a string."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise click.BadParameter(f"expected KEY=VALUE, not {text!r}")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def _options(
    ctx: click.Context, param: click.Parameter, values: Sequence[str]
) -> list[tuple[str, Any]]:
    return [_option(v) for v in values]


def _echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def _when(epoch: float | None) -> str:
    """``epoch`` as an ISO 8601 UTC time to the second (``-`` for none)."""
    if not epoch:
        return "-"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _out() -> Console:
    """The console of data printed for people (stdout), as wide as a terminal or 120."""
    return Console(width=None if sys.stdout.isatty() else 120, soft_wrap=False)


class Failed(click.ClickException):
    """A failed operation: printed as ``error: ...`` on one line, exit code 1."""

    exit_code = 1

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {self.format_message()}", file=file or sys.stderr)


class _Group(click.Group):
    """The command group: a typed error of the library becomes one ``error:`` line and exit
    code 1, and output into a pipe whose reader went away stops quietly."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            result = super().invoke(ctx)
            sys.stdout.flush()
        except BrokenPipeError:
            # The reader went away (`memory-adapters plugins | head`): stop quietly, as a
            # command killed by SIGPIPE would, and keep the interpreter's last flush from
            # failing too.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise SystemExit(128 + signal.SIGPIPE) from None
        except MemoryAdaptersError as exc:
            raise Failed(f"{type(exc).__name__}: {' '.join(str(exc).split())}") from exc
        return result


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    click.echo(f"{PROG} {version()}")
    raise SystemExit(0)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Print the version and exit.",
)
@click.option(
    "--url",
    envvar=ENV_URL,
    show_envvar=True,
    metavar="URL",
    help="The store URL, as given to Memory(url): sqlite:///memory.db, postgresql://..., "
    "mongodb://..., memory://",
)
@click.option(
    "-o",
    "--option",
    "options",
    multiple=True,
    metavar="KEY=VALUE",
    callback=_options,
    help="A store option, as in Memory(url, store_options={...}); the value is JSON when it "
    "parses (-o schema=memory -o timeout=5). Repeatable.",
)
@click.pass_context
def app(ctx: click.Context, url: str | None, options: list[tuple[str, Any]]) -> None:
    """Durable memory for pydantic-ai and LangChain agents: inspect, move and maintain a store."""
    runtime = ctx.ensure_object(Runtime)
    if url:
        runtime.url = url
    runtime.options.update(options)


# -- plugins, migrate -------------------------------------------------------------------------


@app.command()
@click.option("--stores", is_flag=True, help="Print only the store URL schemes.")
def plugins(stores: bool) -> None:
    """Print the installed plugins and their hooks as JSON."""
    pm = PluginManager(load_entrypoints=True)
    info = pm.describe()
    if stores:
        _echo_json(sorted(pm.registries.stores))
        return
    registries = pm.registries
    for item in info:
        item["stores"] = sorted(s for s, r in registries.stores.items() if r.plugin == item["name"])
        item["adapters"] = [a.name for a, plugin in registries.adapters if plugin == item["name"]]
    _echo_json(info)


@app.command()
@click.argument("url", required=False, metavar="[URL]")
@click.option(
    "-o",
    "--option",
    "options",
    multiple=True,
    metavar="KEY=VALUE",
    callback=_options,
    help='A store option, as in Memory(url, store_options={...}) (e.g. -o schema="memory").',
)
@click.pass_context
def migrate(ctx: click.Context, url: str | None, options: list[tuple[str, Any]]) -> None:
    """Create or upgrade a store's tables (as a role allowed to), then exit.

    Opening the store at URL (or --url) creates or upgrades its tables. Run it once as a role
    that may create them, so that applications can open the store with
    store_options={"migrate": False}.
    """
    runtime = _runtime(ctx)
    if url:
        runtime.url = url
    runtime.options.update(options)
    with runtime.memory(embed=False) as memory:
        store = memory.store
        run = getattr(store, "migrate", None)
        done = run() if callable(run) else None
    at = f" (schema version {done})" if isinstance(done, int) else ""
    click.echo(f"{type(store).__name__}: the tables are ready{at}")


# -- doctor ----------------------------------------------------------------------------------


@dataclass
class Check:
    """One line of ``doctor``: what was checked, whether it passed, what was found."""

    name: str
    ok: bool
    detail: str
    required: bool = True


_PROBE_NAMESPACE = "memory-adapters-doctor#probe"
_FULL_TEXT = {
    "memory": "an inverted index per scope",
    "sqlite": "a term index per scope",
    "postgresql": "a term index per scope",
    "mongodb": "a multikey index of terms",
}


def _stored_version(store: Store) -> int | None:
    """The schema version the store's database records, where the doctor can read it (SQLite:
    ``PRAGMA user_version``, on the store's own connection)."""
    connection = getattr(store, "_connection", None)
    if store.scheme != "sqlite" or not callable(connection):
        return None
    with connection() as db:
        (version,) = db.execute("PRAGMA user_version").fetchone()
    return int(version)


def _schema_check(store: Store) -> Check:
    """Whether the store's schema is the one this version uses, said plainly."""
    check = getattr(store, "check", None)
    if callable(check):  # PostgreSQL: the version the schema is at, and the role's grants
        return Check("schema version", True, f"{check()}, the one this version uses: OK")
    module = sys.modules.get(type(store).__module__)
    wanted = getattr(module, "SCHEMA_VERSION", None)
    if not isinstance(wanted, int):
        return Check("schema version", True, "not versioned (nothing to migrate)")
    found = _stored_version(store)
    if found is None:
        return Check("schema version", True, f"{wanted} (upgraded when the store opens)")
    if found == wanted:  # opening the store upgraded an older one
        return Check("schema version", True, f"{found}, the one this version uses: OK")
    if found > wanted:
        return Check(
            "schema version",
            False,
            f"{found}, newer than the {wanted} this version uses: upgrade memory-adapters to "
            "use this database",
        )
    return Check(
        "schema version",
        False,
        f"{found}, older than the {wanted} this version uses, and opening the store did not "
        "upgrade it",
    )


def _doctor_checks(runtime: Runtime) -> list[Check]:
    checks: list[Check] = []
    try:
        memory = runtime.memory()
    except click.UsageError:
        raise
    except Exception as exc:
        checks.append(Check("store", False, f"cannot open the store: {type(exc).__name__}: {exc}"))
        return checks
    with memory:
        store = memory.store
        try:
            store.last_seq(_PROBE_NAMESPACE + ":doctor:probe")
        except Exception as exc:
            checks.append(Check("store", False, f"unreachable: {type(exc).__name__}: {exc}"))
            return checks
        checks.append(Check("store", True, f"{type(store).__name__} answers"))
        try:
            checks.append(_schema_check(store))
        except Exception as exc:
            checks.append(Check("schema version", False, f"{type(exc).__name__}: {exc}"))
        try:
            store.match_terms(_PROBE_NAMESPACE, "doctor", ["probe"])
            engine = _FULL_TEXT.get(store.scheme, "the store's own")
            checks.append(Check("keyword search", True, f"{engine}; BM25 in the core"))
        except Exception as exc:
            checks.append(Check("keyword search", False, f"{type(exc).__name__}: {exc}"))
        try:
            store.search_fact_vectors(
                _PROBE_NAMESPACE, "doctor", [1.0], model="memory-adapters-doctor", limit=1
            )
            how = "exact cosine within a scope"
            if getattr(store, "pgvector_schema", None):
                how = "pgvector"
            checks.append(Check("vector search", True, how, required=False))
        except Unsupported as exc:
            checks.append(Check("vector search", False, str(exc), required=False))
        except Exception as exc:
            checks.append(Check("vector search", False, f"{type(exc).__name__}: {exc}"))
        from . import tokens

        enc = tokens.encoding(memory.model)
        why = 'approximate counts: pip install "memory-adapters[offline]"'
        if tokens.unavailable():
            why = " ".join(str(tokens.unavailable()).split())
        if enc is not None:
            wanted = tokens.encoding_name(memory.model)
            found = f"tiktoken {enc.name}"
            if enc.name != wanted:
                found += f" ({wanted} could not be loaded: counts are close, not exact)"
            checks.append(Check("tokenizer", True, found, required=False))
        else:
            checks.append(Check("tokenizer", False, why, required=False))
        embedder = memory.embedder
        if embedder is None:
            checks.append(Check("embedder", False, "none: keyword search only", required=False))
        else:
            found = f"{type(embedder).__name__} {embedder.name!r}"
            checks.append(Check("embedder", True, found, required=False))
    return checks


@app.command()
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
@click.pass_context
def doctor(ctx: click.Context, as_json: bool) -> None:
    """Check the store and the environment: one line per check; exit code 1 if a required
    check fails (the store, its schema, full-text search)."""
    checks = _doctor_checks(_runtime(ctx))
    failed = [c for c in checks if c.required and not c.ok]
    if as_json:
        _echo_json({"ok": not failed, "checks": [asdict(c) for c in checks]})
    else:
        out = _out()
        for c in checks:
            mark = (
                ("[green]ok[/]" if c.ok else "[red]FAIL[/]")
                if c.required or c.ok
                else ("[yellow]--[/]")
            )
            line = Text.from_markup(f"{mark:>4} ")
            line.append(f"{c.name}: ", style="bold")
            line.append(c.detail)
            out.print(line)
    if failed:
        ctx.exit(1)


# -- conversations, stats, show ------------------------------------------------------------------


def _parse_before(text: str | None) -> tuple[float, str] | None:
    """``--before``: ``EPOCH[:KEY]`` (the cursor a page of ``conversations`` prints) or an ISO
    8601 time: conversations whose last activity is older."""
    if text is None:
        return None
    head, sep, key = text.partition(":")
    try:
        return float(head), key if sep else ""
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(
            f"expected EPOCH, EPOCH:KEY (the cursor of the previous page) or an ISO 8601 time, "
            f"not {text!r}",
            param_hint="--before",
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp(), ""


def _prefix(namespace: str | None, user: str | None, default_namespace: str) -> str:
    """The conversation-key prefix of a namespace (and user); ``""``: every namespace."""
    from .scope import Scope

    if user is not None:
        scope = Scope(namespace=namespace or default_namespace, user_id=user, conversation_id="x")
        return scope.conversation_key[: -len("x")]
    if namespace is not None:
        scope = Scope(namespace=namespace, user_id="u", conversation_id="x")
        return scope.conversation_key.split(":", 1)[0] + ":"
    return ""


def _info_json(info: Any) -> dict[str, Any]:
    d = asdict(info)
    d["last_activity_iso"] = _when(info.last_activity)
    return d


@app.command()
@click.option("--user", "user", metavar="U", help="Only this user's conversations.")
@click.option(
    "--namespace",
    metavar="N",
    help="Only this namespace (default: every namespace; with --user, the default one).",
)
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 10_000))
@click.option(
    "--before",
    metavar="CURSOR",
    help="The next page: the cursor the previous page printed (EPOCH:KEY), or an ISO time.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the page as JSON.")
@click.pass_context
def conversations(
    ctx: click.Context,
    user: str | None,
    namespace: str | None,
    limit: int,
    before: str | None,
    as_json: bool,
) -> None:
    """List conversations, newest activity first, with message and token counts."""
    cursor = _parse_before(before)
    with _runtime(ctx).memory(embed=False) as memory:
        prefix = _prefix(namespace, user, memory.namespace)
        page = memory.store.list_conversations(prefix, limit=limit, before=cursor)
    more = f"{page[-1].last_activity!r}:{page[-1].key}" if len(page) == limit else None
    if as_json:
        _echo_json({"conversations": [_info_json(i) for i in page], "next_before": more})
        return
    table = Table("key", "user", "conversation", "messages", "tokens", "last activity")
    for i in page:
        table.add_row(
            i.key, i.user_id, i.conversation_id, str(i.messages), str(i.tokens),
            _when(i.last_activity),
        )  # fmt: skip
    out = _out()
    out.print(table)
    if more:
        out.print(Text(f"more: --before '{more}'"), soft_wrap=True)


def _all_conversations(store: Store, prefix: str) -> Iterator[Any]:
    """Every conversation under ``prefix``, page by page (never all held at once)."""
    before: tuple[float, str] | None = None
    while True:
        page = store.list_conversations(prefix, limit=PAGE, before=before)
        yield from page
        if len(page) < PAGE:
            return
        before = (page[-1].last_activity, page[-1].key)


@app.command()
@click.option("--namespace", metavar="N", help="Only this namespace (default: every one).")
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON.")
@click.pass_context
def stats(ctx: click.Context, namespace: str | None, as_json: bool) -> None:
    """Count conversations, messages, tokens and facts, per namespace."""
    from .conversation_search import count_indexed
    from .transfer import count_facts

    rows: dict[str, dict[str, int]] = {}
    with _runtime(ctx).memory(embed=False) as memory:
        store = memory.store
        for info in _all_conversations(store, _prefix(namespace, None, memory.namespace)):
            row = rows.setdefault(info.namespace, dict.fromkeys(_STATS, 0))
            row["conversations"] += 1
            row["messages"] += info.messages
            row["tokens"] += info.tokens
        names = set(rows) | {namespace or memory.namespace}
        for ns in sorted(names):
            row = rows.setdefault(ns, dict.fromkeys(_STATS, 0))
            row["facts"] = count_facts(store, ns)
            row["working"] = count_facts(store, ns + "#working")
            row["indexed"] = count_indexed(store, ns)
    if as_json:
        _echo_json({"namespaces": {ns: rows[ns] for ns in sorted(rows)}})
        return
    table = Table("namespace", *_STATS)
    for ns in sorted(rows):
        table.add_row(ns, *(f"{rows[ns][k]:,}" for k in _STATS))
    _out().print(table)


_STATS = ("conversations", "messages", "tokens", "facts", "working", "indexed")


@app.command()
@click.option("--namespace", metavar="N", help="Only this namespace (default: every one).")
@click.option("--user", metavar="U", help="Only this user's conversations.")
@click.option(
    "--embed/--no-embed",
    default=True,
    help="Embed the messages for semantic search too (default; the embedder is the one "
    "Memory picks: $MEMORY_ADAPTERS_EMBED or the installed default).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON.")
@click.pass_context
def reindex(
    ctx: click.Context, namespace: str | None, user: str | None, embed: bool, as_json: bool
) -> None:
    """Index the stored messages that conversation search has not indexed yet (after an
    upgrade, an import, or with Memory(index_conversations=False)): resumable, in batches;
    what is indexed already is skipped."""
    from .conversation_search import index_plan
    from .steps import drive_sync

    runtime = _runtime(ctx)
    indexed = conversations = 0
    with runtime.memory(**({} if embed else {"embed": False})) as memory:
        store = memory.store
        infos = list(_all_conversations(store, _prefix(namespace, user, memory.namespace)))
        with RichProgress(runtime.err()) as progress:
            progress.begin("messages", sum(i.messages for i in infos))
            for info in infos:
                indexed += drive_sync(index_plan(memory, info.key), store, memory.hooks)
                conversations += 1
                progress.advance("messages", info.messages)
        embedder = memory.embedder.name if memory.embedder is not None else None
    data = {"conversations": conversations, "indexed": indexed, "embedder": embedder}
    if as_json:
        _echo_json(data)
    else:
        runtime.err().print(
            f"reindexed: {indexed:,} messages of {conversations:,} conversations"
            + (f" (embedded by {embedder})" if embedder else " (words only)")
        )


def _conversation_key(
    key: str | None, user: str | None, conversation: str | None, namespace: str | None,
    default_namespace: str,
) -> str:  # fmt: skip
    from .scope import Scope

    if key is not None:
        if conversation is not None or user is not None:
            raise click.UsageError("give a conversation KEY or --user/--conversation, not both")
        return key
    if conversation is None:
        raise click.UsageError(
            "give a conversation KEY (as `conversations` lists it) or --conversation C "
            "(with --user U)"
        )
    return Scope(
        namespace=namespace or default_namespace, user_id=user, conversation_id=conversation
    ).conversation_key


def _records(store: Store, key: str, start: int, end: int) -> Iterator[Record]:
    """The records ``start..end`` of a conversation, read a page at a time."""
    seq = start
    while seq <= end:
        page = store.read(key, start_seq=seq, end_seq=end, limit=PAGE)
        if not page:
            return
        yield from page
        seq = page[-1].seq + 1


_ROLE_STYLE = {"system": "magenta", "user": "cyan", "assistant": "green", "tool": "yellow"}


def _compact(value: Any, limit: int = 2000) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text) - limit} more)"


_CONVERSATION_STORE_LINKS = ("entry", "parent", "parent_at")
"""What pydantic-ai's ``ConversationStore`` backend records on the head of each entry."""


def _shown_meta(m: Message) -> dict[str, Any]:
    """A message's ``meta`` as ``show`` prints it: without the adapters' bookkeeping (the key
    named after the message's framework, ``{"pydantic_ai": {"part": 0, "of": 1}}``, and the
    ``ConversationStore`` backend's links between entries). ``--json`` prints all of it."""
    if not m.framework:
        return m.meta
    hidden = {m.framework, m.framework.replace("-", "_")}
    if m.framework == "pydantic-ai":
        hidden.update(_CONVERSATION_STORE_LINKS)
    return {k: v for k, v in m.meta.items() if k not in hidden}


def _render(record: Record) -> Text:
    m = record.message
    head = Text()
    head.append(f"#{record.seq} ", style="dim")
    head.append(m.role, style=f"bold {_ROLE_STYLE.get(m.role, '')}")
    head.append(f"  {record.tokens} tokens", style="dim")
    if record.batch == record.seq:
        head.append(f"  turn {record.batch}", style="dim")
    if record.run_id:
        head.append(f"  run {record.run_id}", style="dim")
    head.append(f"  {_when(record.created_at)}", style="dim")
    if m.framework:
        head.append(f"  {m.framework}", style="dim")
    meta = _shown_meta(m)
    if meta:
        head.append(f"  {json.dumps(meta, ensure_ascii=False)}", style="dim")
    lines = [head]
    if m.text:
        lines.append(Text("  " + m.text.replace("\n", "\n  ")))
    for call in m.tool_calls:
        line = Text("  → call ", style="bold")
        line.append(call.name, style="bold blue")
        line.append(f"({_compact(call.args)})")
        line.append(f"  id {call.id}", style="dim")
        lines.append(line)
    for result in m.tool_results:
        line = Text("  ← result ", style="bold")
        if result.name:
            line.append(result.name, style="bold blue")
            line.append(" ")
        if result.is_error:
            line.append("error ", style="bold red")
        line.append(_compact(result.content))
        line.append(f"  id {result.id}", style="dim")
        lines.append(line)
    return Text("\n").join(lines)


@app.command()
@click.argument("key", required=False, metavar="[CONVERSATION]")
@click.option("--user", metavar="U", help="The user, with --conversation.")
@click.option("--conversation", metavar="C", help="The conversation id (with --user U).")
@click.option("--namespace", metavar="N", help="The namespace of --conversation.")
@click.option("--last", type=click.IntRange(min=1), metavar="N", help="Only the last N messages.")
@click.option("--json", "as_json", is_flag=True, help="Print the messages as a JSON array.")
@click.pass_context
def show(
    ctx: click.Context,
    key: str | None,
    user: str | None,
    conversation: str | None,
    namespace: str | None,
    last: int | None,
    as_json: bool,
) -> None:
    """Print a conversation like a chat: roles, text, tool calls and results, seqs, tokens.

    CONVERSATION is a key as `conversations` prints it; or name it with --user and
    --conversation (and --namespace). Messages are read a page at a time.
    """
    with _runtime(ctx).memory(embed=False) as memory:
        key = _conversation_key(key, user, conversation, namespace, memory.namespace)
        store = memory.store
        end = store.last_seq(key)
        if end == 0:
            raise Failed(f"no conversation {key!r} (or it holds no messages)")
        start = 1 if last is None else max(1, end - last + 1)
        if as_json:
            click.echo("[")
            for r in _records(store, key, start, end):
                item = {
                    "seq": r.seq, "batch": r.batch, "tokens": r.tokens, "run_id": r.run_id,
                    "created_at": r.created_at, "message": r.message.to_dict(),
                }  # fmt: skip
                tail = "," if r.seq < end else ""
                click.echo("  " + json.dumps(item, ensure_ascii=False) + tail)
            click.echo("]")
            return
        out = _out()
        out.rule(Text(f"{key}  ({end} messages)"))
        for r in _records(store, key, start, end):
            if r.batch == r.seq and r.seq != start:
                out.print()  # a blank line between turns
            out.print(_render(r))


@app.command()
@click.argument("key", metavar="KEY")
@click.option("--user", required=True, metavar="U", help="Whose fact.")
@click.option("--agent", metavar="A", help="The agent of the fact's scope, if it has one.")
@click.option("--namespace", metavar="N", help="The namespace (default: the default one).")
@click.option("--json", "as_json", is_flag=True, help="Print the changes as a JSON array.")
@click.pass_context
def history(
    ctx: click.Context,
    key: str,
    user: str,
    agent: str | None,
    namespace: str | None,
    as_json: bool,
) -> None:
    """Print the versions of one fact of a user, newest first: each value, when, and who
    wrote it (the application; a model through a memory tool, with its run; an extractor,
    with its model and the conversation range it read)."""
    from .facts import Facts
    from .scope import Scope

    with _runtime(ctx).memory(embed=False) as memory:
        scope = Scope(namespace=namespace or memory.namespace, user_id=user, agent_id=agent)
        changes = Facts(memory, scope).history(key)
        if as_json:
            rows = [
                {"version": c.version, "op": c.op, "value": c.value, "at": c.at,
                 "writer": json.loads(c.writer.to_json())}
                for c in changes
            ]  # fmt: skip
            click.echo(json.dumps(rows, ensure_ascii=False, indent=2))
            return
        if not changes:
            raise Failed(f"no history of fact {key!r} for user {user!r}")
        out = _out()
        for c in changes:
            when = _when(c.at)
            what = "forgotten" if c.op == "forget" else json.dumps(c.value, ensure_ascii=False)
            w = c.writer
            who: str = w.kind
            if w.model:
                who += f" {w.model}"
            if w.run_id:
                who += f" (run {w.run_id})"
            if w.conversation:
                who += f" (read {w.conversation} seqs {w.start_seq}..{w.end_seq})"
            out.print(Text(f"v{c.version}  {when}  {what}  by {who}"))


# -- export, import --------------------------------------------------------------------------


class RichProgress:
    """Progress bars on a rich console, as :mod:`.transfer` reports progress."""

    def __init__(self, console: Console) -> None:
        self.bars = Progress(
            TextColumn("{task.description:<9}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.percentage:>3.0f}%"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self.tasks: dict[str, TaskID] = {}

    def begin(self, what: str, total: int | None) -> None:
        """A bar for ``what`` (``"messages"``, ``"facts"``), out of ``total`` if known."""
        if not self.tasks:  # the bars show from the first one on (not for a file read in vain)
            self.bars.start()
        if what in self.tasks:
            self.bars.update(self.tasks[what], total=total)
        else:
            self.tasks[what] = self.bars.add_task(what, total=total)

    def advance(self, what: str, amount: int = 1) -> None:
        """``amount`` more of ``what`` done."""
        if what not in self.tasks:
            self.begin(what, None)
        self.bars.advance(self.tasks[what], amount)

    def finish(self) -> None:
        """Mark every bar done (a bar without a total gets its count as the total)."""
        for task in self.bars.tasks:
            self.bars.update(task.id, total=task.completed)

    def __enter__(self) -> RichProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.tasks:
            return
        if exc[0] is None:
            self.finish()
        self.bars.stop()


@contextmanager
def _opened(path: str, mode: str) -> Iterator[IO[str]]:
    if path == "-":
        yield sys.stdout if "w" in mode else sys.stdin
        return
    with open(path, mode, encoding="utf-8", newline="\n") as f:
        yield f


@app.command()
@click.option("--user", metavar="U", help="Only this user's conversations and facts.")
@click.option(
    "--namespace",
    "namespaces",
    multiple=True,
    metavar="N",
    help="A namespace to export (repeatable; default: the default namespace and every "
    "namespace holding a conversation).",
)
@click.option(
    "-o", "--output", required=True, metavar="FILE|-", help="Where to write (- for stdout)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON (on stderr).")
@click.pass_context
def export(
    ctx: click.Context, user: str | None, namespaces: tuple[str, ...], output: str, as_json: bool
) -> None:
    """Write conversations and facts as JSON Lines (docs/cli.md: the format), streamed."""
    from .transfer import export_jsonl

    runtime = _runtime(ctx)
    with runtime.memory(embed=False) as memory, _opened(output, "w") as out:
        with RichProgress(runtime.err()) as progress:
            counts = export_jsonl(
                memory, out, namespace=list(namespaces) or None, user_id=user, progress=progress
            )
        out.flush()
    _report(runtime, "exported", counts, as_json)


@app.command(name="import")
@click.argument("source", metavar="FILE|-")
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON (on stderr).")
@click.pass_context
def import_(ctx: click.Context, source: str, as_json: bool) -> None:
    """Read an export into the store; importing the same file again changes nothing."""
    from .transfer import import_jsonl

    runtime = _runtime(ctx)
    with (
        runtime.memory(embed=False) as memory,
        _opened(source, "r") as inp,
        RichProgress(runtime.err()) as progress,
    ):
        counts = import_jsonl(memory, inp, progress=progress)
    _report(runtime, "imported", counts, as_json)


def _report(runtime: Runtime, verb: str, counts: Any, as_json: bool) -> None:
    data = asdict(counts)
    skipped = {k.removeprefix("skipped_"): v for k, v in data.items() if k.startswith("skipped_")}
    data = {k: v for k, v in data.items() if not k.startswith("skipped_")}
    if as_json:
        click.echo(json.dumps(data if verb == "exported" else asdict(counts)), err=True)
        return
    said = f"{verb}: " + ", ".join(f"{v:,} {k}" for k, v in data.items())
    if verb == "imported" and any(skipped.values()):  # what the store held already
        held = ", ".join(f"{v:,} {k}" for k, v in skipped.items())
        if not (data["batches"] or data["facts"] or data["history"]):
            said = (
                "nothing imported: the store held all of it already "
                f"({data['conversations']:,} conversations: {held})"
            )
        else:
            said += f"; already in the store, skipped: {held}"
    runtime.err().print(said)


# -- prune, erase -----------------------------------------------------------------------------


@app.command()
@click.option(
    "--idle-days",
    type=click.FloatRange(min=0, min_open=True),
    metavar="N",
    help="Also delete conversations idle for more than N days (with their working memory).",
)
@click.option(
    "--namespace", metavar="N", help="The namespace of --idle-days (default: the default one)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def prune(
    ctx: click.Context, idle_days: float | None, namespace: str | None, as_json: bool
) -> None:
    """Delete expired facts now (and, with --idle-days, idle conversations)."""
    with _runtime(ctx).memory(embed=False) as memory:
        if idle_days is None:
            data: dict[str, Any] = {"conversations": 0, "facts": memory.store.prune()}
        else:
            report = memory.retain(idle_days=idle_days, namespace=namespace)
            data = asdict(report)
    if as_json:
        _echo_json(data)
    else:
        click.echo("pruned: " + ", ".join(f"{v} {k}" for k, v in data.items()))


@app.command()
@click.option("--user", required=True, metavar="U", help="The user whose memory goes.")
@click.option("--namespace", metavar="N", help="The namespace (default: the default one).")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def erase(ctx: click.Context, user: str, namespace: str | None, yes: bool, as_json: bool) -> None:
    """Erase everything of one user in one namespace: conversations, summaries, facts,
    working memory, vectors and fact history. Asks first, unless --yes."""
    with _runtime(ctx).memory(embed=False) as memory:
        ns = namespace or memory.namespace
        if not yes:
            asked = f"Erase everything of user {user!r} in namespace {ns!r}? This cannot be undone"
            if not click.confirm(asked, default=False, err=True):
                click.echo("nothing erased", err=True)
                ctx.exit(1)
        report = memory.erase(user_id=user, namespace=ns)
    data = asdict(report)
    if as_json:
        _echo_json(data)
    else:
        click.echo("erased: " + ", ".join(f"{v} {k}" for k, v in data.items()))


# -- mcp --------------------------------------------------------------------------------------


def _host_port(text: str) -> tuple[str, int]:
    """``HOST:PORT`` of ``--http`` (``[::1]:8000`` for IPv6)."""
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise click.BadParameter(f"expected HOST:PORT, not {text!r}", param_hint="--http")
    return host, int(port)


@app.command("mcp")
@click.option("--user", metavar="U", help="stdio: the user whose memory the client reaches.")
@click.option(
    "--agent", metavar="A", help="stdio: keep this client's facts apart, as agent A's of the user."
)
@click.option(
    "--namespace",
    metavar="N",
    help="The namespace (default: the Memory's); over HTTP, of the tokens that name none.",
)
@click.option(
    "--http",
    "http",
    metavar="HOST:PORT",
    help="Serve streamable HTTP on HOST:PORT (port 0: a free one) instead of stdio; every "
    "request needs a bearer token that --tokens or a plugin maps to a user.",
)
@click.option(
    "--tokens",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    help="HTTP: the JSON file mapping bearer tokens to users (docs/mcp.md); read again when "
    "it changes.",
)
@click.pass_context
def mcp(
    ctx: click.Context,
    user: str | None,
    agent: str | None,
    namespace: str | None,
    http: str | None,
    tokens: str | None,
) -> None:
    """Serve the memory tools to MCP clients: over stdio for one local client and one user
    (--user), or over streamable HTTP (--http) for many, each request's user from its bearer
    token. No tool takes a user or scope: the server decides whose memory, never the client."""
    import anyio

    from .scope import Scope

    if http is None:
        if tokens is not None:
            raise click.UsageError("--tokens is for --http: over stdio, --user names the user")
        if user is None:
            raise click.UsageError("over stdio the server serves one user's memory: give --user U")
    elif user is not None or agent is not None:
        raise click.UsageError(
            "over HTTP each request's user comes from its bearer token (--tokens FILE or an "
            "mcp_authenticate plugin), never from --user or --agent"
        )
    address = _host_port(http) if http is not None else None
    import memory_adapters_mcp as plugin

    if not plugin.has_mcp():
        raise Failed(f"MissingExtra: {MissingExtra('mcp', 'mcp')}")
    from memory_adapters_mcp import server

    extra: list[object] = [plugin.TokenFile(tokens)] if tokens is not None else []
    with _runtime(ctx).memory(plugins=extra) as memory:
        ns = namespace or memory.namespace
        if address is None:
            scope = Scope(namespace=ns, user_id=user, agent_id=agent)
            with suppress(KeyboardInterrupt):
                anyio.run(server.serve_stdio, memory, scope)
            return
        if not memory.hooks.authenticates_mcp:
            raise click.UsageError(
                "over HTTP every request needs a bearer token mapped to a user: give --tokens "
                "FILE, or install a plugin implementing mcp_authenticate"
            )
        with suppress(KeyboardInterrupt):
            server.serve_http(memory, address[0], address[1], namespace=ns)


# -- entry point ------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``memory-adapters`` command: the command's exit code (a usage error,
    ``--help`` and ``--version`` exit, as argparse does)."""
    try:
        result = app.main(args=list(argv) if argv is not None else None, prog_name=PROG,
                          standalone_mode=False)  # fmt: skip
    except click.UsageError as exc:
        exc.show()
        raise SystemExit(exc.exit_code) from None
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.Abort:
        click.echo("aborted", err=True)
        return 1
    return result if isinstance(result, int) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
