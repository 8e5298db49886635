"""Plugin loading: entry points (a real third-party distribution), isolation, the command."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from memory_adapters_inmemory import InMemoryStore

from memory_adapters import (
    Memory,
    MissingExtra,
    NoAdapter,
    PluginError,
    PluginWarning,
    UnknownScheme,
    hookimpl,
)
from memory_adapters import plugins as plugin_loading

THIRD_PARTY = {
    "pyproject.toml": """
        [build-system]
        requires = ["setuptools"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "memory-adapters-tinystore"
        version = "0.3.0"

        [project.entry-points.memory_adapters]
        tinystore = "tinystore"
        broken = "tinystore_broken"

        [tool.setuptools]
        py-modules = ["tinystore", "tinystore_broken"]
    """,
    "tinystore.py": """
        from memory_adapters import hookimpl
        from memory_adapters_inmemory import InMemoryStore

        class TinyStore(InMemoryStore):
            scheme = "tiny"

            def __init__(self, url):
                super().__init__()
                self.url = url

        @hookimpl
        def register_stores(register):
            register("tiny", lambda url, **options: TinyStore(url))
    """,
    "tinystore_broken.py": """
        raise RuntimeError("this plugin is broken on purpose")
    """,
}


@pytest.fixture(scope="module")
def third_party(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real distribution with two `memory_adapters` entry points, installed by pip into a
    target directory (one plugin works, one raises on import)."""
    src = tmp_path_factory.mktemp("tinystore-src")
    for name, text in THIRD_PARTY.items():
        (src / name).write_text(textwrap.dedent(text))
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(src),
        ],
        check=True,
    )
    return target


@pytest.fixture
def installed(third_party: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Put the third-party distribution on sys.path and reload entry points around the test."""
    monkeypatch.syspath_prepend(str(third_party))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PluginWarning)
        plugin_loading.loaded_entrypoints(refresh=True)
    yield third_party
    monkeypatch.undo()
    for mod in ("tinystore", "tinystore_broken"):
        sys.modules.pop(mod, None)
    plugin_loading.loaded_entrypoints(refresh=True)


def test_third_party_store_resolves_and_broken_plugin_warns_once(installed: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plugin_loading.loaded_entrypoints(refresh=True)
        memory = Memory("tiny://somewhere")
        Memory("tiny://elsewhere")
        Memory("memory://")
    broken = [w for w in caught if issubclass(w.category, PluginWarning)]
    assert len(broken) == 1, [str(w.message) for w in caught]
    assert "broken" in str(broken[0].message) and "RuntimeError" in str(broken[0].message)
    assert type(memory.store).__name__ == "TinyStore"
    assert memory.store.url == "tiny://somewhere"  # type: ignore[attr-defined]
    assert "tiny" in memory.schemes and "sqlite" in memory.schemes
    with memory.session(user_id="u", conversation_id="c"):
        memory.facts.put("works", True)  # the Memory is fully usable
        assert memory.facts.get("works") is not None
    info = {p["name"]: p for p in memory.pm.describe()}
    assert info["tinystore"]["distribution"] == "memory-adapters-tinystore"
    assert info["tinystore"]["version"] == "0.3.0"
    assert info["tinystore"]["hooks"] == ["register_stores"]
    assert "broken" not in info


def test_autoload_can_be_disabled_or_restricted(
    installed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(plugin_loading.ENV_DISABLE_AUTOLOAD, "1")
    gc.collect()  # what earlier tests left to collect is not this block's to warn about
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing third-party is even imported
        plugin_loading.loaded_entrypoints(refresh=True)
    memory = Memory("memory://")
    assert "tiny" not in memory.schemes and "sqlite" in memory.schemes  # built-ins still load
    monkeypatch.delenv(plugin_loading.ENV_DISABLE_AUTOLOAD)
    monkeypatch.setenv(plugin_loading.ENV_PLUGINS, "tinystore")
    gc.collect()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the broken plugin is not even imported
        plugin_loading.loaded_entrypoints(refresh=True)
    assert "tiny" in Memory("memory://").schemes


def test_the_command_lists_plugins_and_their_hooks(installed: Path) -> None:
    env_path = str(installed)
    out = subprocess.run(
        [sys.executable, "-m", "memory_adapters", "plugins"],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": env_path},
    )
    plugins = {p["name"]: p for p in json.loads(out.stdout)}
    assert plugins["sqlite"]["hooks"] == ["register_stores"]
    assert plugins["sqlite"]["stores"] == ["sqlite"]
    assert plugins["sqlite"]["distribution"] == "memory-adapters"
    assert plugins["inmemory"]["stores"] == ["memory"]
    assert plugins["memory_adapters.tokens"]["hooks"] == ["count_tokens"]
    assert plugins["memory_adapters.window"]["hooks"] == ["select_window"]
    assert plugins["tinystore"]["stores"] == ["tiny"]
    assert "PluginWarning" in out.stderr and "broken" in out.stderr
    stores = subprocess.run(
        [sys.executable, "-m", "memory_adapters", "plugins", "--stores"],
        check=True,
        capture_output=True,
        text=True,
    )
    assert {"memory", "sqlite", "postgresql"} <= set(json.loads(stores.stdout))


def test_unknown_scheme_names_the_installed_ones() -> None:
    with pytest.raises(UnknownScheme) as info:
        Memory("nosuch://x")
    message = str(info.value)
    assert "nosuch://" in message and "memory://" in message and "sqlite://" in message
    with pytest.raises(UnknownScheme, match="sqlite"):
        Memory("just-a-path.db")
    with pytest.raises(ValueError):  # the typed error is also a ValueError
        Memory("nosuch://x")


class ExtraNeeded:
    @hookimpl
    def register_stores(self, register: Any) -> None:
        def factory(url: str, **options: Any) -> Any:
            raise MissingExtra("fancy", "the fancy driver")

        register("fancy", factory)


def test_missing_extra_names_the_pip_command() -> None:
    with pytest.raises(MissingExtra, match=r'pip install "memory-adapters\[fancy\]"'):
        Memory("fancy://x", plugins=[ExtraNeeded()])
    with pytest.raises(ImportError):
        Memory("fancy://x", plugins=[ExtraNeeded()])


def test_plugins_are_per_memory() -> None:
    a = Memory("memory://", plugins=[ExtraNeeded()])
    b = Memory("memory://")
    assert "fancy" in a.schemes and "fancy" not in b.schemes
    plugin = ExtraNeeded()
    b.register(plugin, name="throwaway")
    assert "fancy" in b.schemes
    b.unregister(name="throwaway")
    assert "fancy" not in b.schemes


class Collide:
    @hookimpl
    def register_stores(self, register: Any) -> None:
        register("memory", lambda url, **o: InMemoryStore())


class CollideToo:
    @hookimpl
    def register_stores(self, register: Any) -> None:
        register("memory", lambda url, **o: InMemoryStore())


def test_scheme_collisions() -> None:
    # overriding a built-in (trylast) store is allowed; two plugins claiming one scheme is not
    assert (
        Memory("memory://", plugins=[Collide()]).pm.registries.stores["memory"].plugin != "inmemory"
    )
    with pytest.raises(PluginError, match="registered by both"):
        Memory("memory://", plugins=[Collide(), CollideToo()])


class FakeAgent:
    def run(self, prompt: str) -> str:
        return prompt.upper()


class FakeAdapter:
    name = "fake"

    def handles(self, obj: object) -> bool:
        return isinstance(obj, FakeAgent)

    def wrap(self, obj: FakeAgent, memory: Memory, **options: Any) -> Any:
        class Wrapped:
            def run(self, prompt: str) -> str:
                with memory.session(conversation_id=options["conversation_id"]):
                    from memory_adapters import Message

                    answer = obj.run(prompt)
                    memory.conversation.append([Message.user(prompt), Message.assistant(answer)])
                    return answer

        return Wrapped()


class FakeAdapterPlugin:
    @hookimpl
    def register_adapters(self, register: Any) -> None:
        register(FakeAdapter())


def test_wrap_dispatches_through_the_adapter_hook() -> None:
    memory = Memory("memory://", plugins=[FakeAdapterPlugin()])
    assert "fake" in memory.adapters
    wrapped = memory.wrap(FakeAgent(), conversation_id="c")
    assert wrapped.run("hi") == "HI"
    with memory.session(conversation_id="c"):
        assert [m.text for m in memory.conversation.messages()] == ["hi", "HI"]
    with pytest.raises(NoAdapter, match="installed adapters: fake") as info:
        memory.wrap(object())
    assert "builtins.object" in str(info.value)
    with pytest.raises(NoAdapter, match="installed adapters"):
        Memory("memory://").wrap(FakeAgent())
