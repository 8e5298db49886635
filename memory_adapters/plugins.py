"""Plugin loading: one plugin manager per ``Memory``, entry points loaded lazily and once.

Built-in plugins and third-party ones arrive the same way, through the ``memory_adapters``
entry-point group. The core's own fallbacks (the tiktoken counter, the default windowing)
are listed in :data:`CORE_PLUGINS` and registered with the same ``register`` call, ``trylast``
so that any plugin overrides them.

Environment variables:

``MEMORY_ADAPTERS_DISABLE_PLUGIN_AUTOLOAD=1``
    Load no third-party entry points; only this distribution's own plugins.
``MEMORY_ADAPTERS_PLUGINS=name,name``
    Load only the third-party entry points with these names (built-ins always load).
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import os
import re
import threading
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import pluggy

from . import hookspecs
from .errors import PluginError, PluginWarning

ENTRYPOINT_GROUP = "memory_adapters"
DISTRIBUTION = "memory-adapters"
ENV_DISABLE_AUTOLOAD = "MEMORY_ADAPTERS_DISABLE_PLUGIN_AUTOLOAD"
ENV_PLUGINS = "MEMORY_ADAPTERS_PLUGINS"
COMPANIONS = "memory_adapters_plugins"
"""A plugin's optional function returning more plugin objects to register with it, asked once
per plugin manager as it loads the plugin."""
ACTIVE = "memory_adapters_active"
"""A plugin's optional method saying, each time the host is about to call a hook, whether the
plugin has anything to do now (see :attr:`PluginManager.gates`)."""

Gates = dict[str, tuple[Callable[[], bool], ...]]
"""Hook name -> the ``memory_adapters_active`` methods of the plugins implementing it."""

CORE_PLUGINS: tuple[str, ...] = (
    "memory_adapters.tokens",
    "memory_adapters.window",
    "memory_adapters.embedders",
    "memory_adapters.summaries",
    "memory_adapters.extraction",
)
"""Modules of the core registered into every plugin manager (their hooks are ``trylast``)."""

BUILTIN_PLUGINS: dict[str, str] = {
    "inmemory": "memory_adapters_inmemory",
    "sqlite": "memory_adapters_sqlite",
    "postgres": "memory_adapters_postgres",
    "mongo": "memory_adapters_mongo",
    "pydantic_ai": "memory_adapters_pydantic_ai",
    "langchain": "memory_adapters_langchain",
    "wordllama": "memory_adapters_wordllama",
    "minilm": "memory_adapters_minilm",
    "otel": "memory_adapters_otel",
    "mcp": "memory_adapters_mcp",
}
"""The built-in plugins this distribution declares as entry points. Used only when the
distribution's metadata is absent (running from a source tree that was never installed)."""


@dataclass(frozen=True, slots=True)
class LoadedPlugin:
    """An entry point that loaded: its name, the object registered, where it came from."""

    name: str
    plugin: object
    distribution: str | None
    version: str | None


_load_lock = threading.Lock()
_loaded: list[LoadedPlugin] | None = None
_broken: dict[str, str] = {}


def _unlock_after_fork() -> None:
    """A child forked while another thread loaded the entry points gets a lock of its own."""
    global _load_lock
    _load_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_unlock_after_fork)


def _autoload_filter() -> Callable[[str], bool]:
    if os.environ.get(ENV_DISABLE_AUTOLOAD, "").strip() not in ("", "0", "false", "no"):
        return lambda name: False
    only = os.environ.get(ENV_PLUGINS)
    if only is not None:
        names = {n.strip() for n in only.split(",") if n.strip()}
        return lambda name: name in names
    return lambda name: True


def _load_entrypoints() -> list[LoadedPlugin]:
    """Import every entry point of the group once per process; warn once about broken ones."""
    allowed = _autoload_filter()
    found: list[LoadedPlugin] = []
    seen: set[str] = set()
    for ep in md.entry_points(group=ENTRYPOINT_GROUP):
        dist = ep.dist.name if ep.dist is not None else None
        version = ep.dist.version if ep.dist is not None else None
        builtin = dist is not None and _normalize(dist) == _normalize(DISTRIBUTION)
        if ep.name in seen or (not builtin and not allowed(ep.name)):
            continue
        try:
            obj = ep.load()
        except Exception as exc:  # a broken plugin must not break Memory
            key = f"{dist}:{ep.name}"
            if key not in _broken:
                _broken[key] = f"{type(exc).__name__}: {exc}"
                warnings.warn(
                    f"memory-adapters plugin {ep.name!r} (from {dist or 'unknown'}) failed to "
                    f"load and is disabled: {type(exc).__name__}: {exc}",
                    PluginWarning,
                    stacklevel=4,
                )
            continue
        seen.add(ep.name)
        found.append(LoadedPlugin(ep.name, obj, DISTRIBUTION if builtin else dist, version))
    for name, module in BUILTIN_PLUGINS.items():
        if name not in seen:
            found.append(LoadedPlugin(name, importlib.import_module(module), DISTRIBUTION, None))
    return found


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def loaded_entrypoints(refresh: bool = False) -> list[LoadedPlugin]:
    """The entry-point plugins of this process, loaded on first call."""
    global _loaded
    with _load_lock:
        if _loaded is None or refresh:
            if refresh:
                _broken.clear()
            _loaded = _load_entrypoints()
        return list(_loaded)


@dataclass(slots=True)
class StoreRegistration:
    """A URL scheme and the factory a plugin registered for it."""

    scheme: str
    factory: Callable[..., Any]
    plugin: str


@dataclass(slots=True)
class Registries:
    """What the registration hooks returned, with the plugin that supplied each item."""

    stores: dict[str, StoreRegistration] = field(default_factory=dict)
    adapters: list[tuple[Any, str]] = field(default_factory=list)


class PluginManager(pluggy.PluginManager):
    """A pluggy manager that loads entry points lazily, once, and tracks implemented hooks.

    ``load_entrypoints=False`` loads only the built-in plugins of this distribution, as the
    ``MEMORY_ADAPTERS_DISABLE_PLUGIN_AUTOLOAD`` variable does.

    ``Memory`` creates one per instance, so plugins registered on one ``Memory`` never leak
    into another.
    """

    def __init__(self, load_entrypoints: bool = True) -> None:
        super().__init__(hookspecs.PROJECT)
        self.add_hookspecs(hookspecs)
        self._want_entrypoints = load_entrypoints
        self._lock = threading.RLock()
        self._entrypoints_loaded = False
        self._implemented: tuple[frozenset[str], Gates] | None = None
        self._registries: Registries | None = None
        self.distinfo: dict[str, tuple[str | None, str | None]] = {}
        for module in CORE_PLUGINS:
            self.register(importlib.import_module(module), name=module)

    # -- loading ---------------------------------------------------------------------------

    def ensure_loaded(self) -> None:
        """Register the entry-point plugins, the first time anything asks for hooks."""
        if self._entrypoints_loaded:
            return
        with self._lock:
            if self._entrypoints_loaded:
                return
            for lp in loaded_entrypoints():
                if not self._want_entrypoints and lp.distribution != DISTRIBUTION:
                    continue  # load_entrypoints=False still loads this distribution's own
                if self.is_registered(lp.plugin) or self.has_plugin(lp.name):
                    continue
                self.register(lp.plugin, name=lp.name)
                self.distinfo[lp.name] = (lp.distribution, lp.version)
                self._register_companions(lp)
            self._entrypoints_loaded = True

    def _register_companions(self, lp: LoadedPlugin) -> None:
        """Register what the plugin's ``memory_adapters_plugins()`` returns, if it has one:
        objects it decides to add to this plugin manager when it is loaded (the OpenTelemetry
        plugin adds its span hooks where ``opentelemetry-api`` is installed). They are named
        ``<plugin>.<n>``."""
        make = getattr(lp.plugin, COMPANIONS, None)
        if not callable(make):
            return
        for i, obj in enumerate(make(), 1):
            name = f"{lp.name}.{i}"
            if not self.has_plugin(name):
                self.register(obj, name=name)
                self.distinfo[name] = (lp.distribution, lp.version)

    def register(self, plugin: object, name: str | None = None) -> str | None:
        """Register a plugin (a module, class or instance with hookimpls)."""
        result = super().register(plugin, name)
        self._invalidate()
        return result

    def unregister(self, plugin: object | None = None, name: str | None = None) -> Any:
        """Unregister a plugin by object or name."""
        result = super().unregister(plugin, name)
        self._invalidate()
        return result

    def _invalidate(self) -> None:
        self._implemented = None
        self._registries = None

    # -- introspection ----------------------------------------------------------------------

    @property
    def implemented(self) -> frozenset[str]:
        """Names of the hooks that have at least one implementation."""
        return self._hook_info()[0]

    @property
    def gates(self) -> Gates:
        """For each hook implemented only by plugins that have a ``memory_adapters_active()``
        method (:data:`ACTIVE`), those methods: the host calls such a hook only when one of
        them returns true at the time (see :meth:`memory_adapters.hooks.Hooks.live`). A hook
        that any other plugin implements is not listed: it is always called."""
        return self._hook_info()[1]

    def _hook_info(self) -> tuple[frozenset[str], Gates]:
        info = self._implemented
        if info is None:
            self.ensure_loaded()
            implemented: set[str] = set()
            gates: Gates = {}
            for name, caller in vars(self.hook).items():
                if not isinstance(caller, pluggy.HookCaller):
                    continue
                impls = caller.get_hookimpls()
                if not impls:
                    continue
                implemented.add(name)
                found = [_gate(impl.plugin) for impl in impls]
                if all(g is not None for g in found):
                    gates[name] = tuple(dict.fromkeys(g for g in found if g is not None))
            info = (frozenset(implemented), gates)
            self._implemented = info
        return info

    @property
    def registries(self) -> Registries:
        """Stores and adapters registered through the registration hooks (computed once)."""
        reg = self._registries
        if reg is None:
            self.ensure_loaded()
            reg = Registries()
            self._collect_stores(reg)
            self._collect_adapters(reg)
            self._registries = reg
        return reg

    def _collect_stores(self, reg: Registries) -> None:
        for impl in reversed(self.hook.register_stores.get_hookimpls()):

            def register(
                scheme: str, factory: Callable[..., Any], _impl: pluggy.HookImpl = impl
            ) -> None:
                scheme = scheme.lower()
                existing = reg.stores.get(scheme)
                if existing is not None:
                    if _impl.trylast:
                        return  # a built-in fallback gives way
                    raise PluginError(
                        f"store scheme {scheme!r} is registered by both plugin "
                        f"{existing.plugin!r} and plugin {_impl.plugin_name!r}"
                    )
                reg.stores[scheme] = StoreRegistration(scheme, factory, _impl.plugin_name)

            impl.function(register=register)

    def _collect_adapters(self, reg: Registries) -> None:
        for impl in reversed(self.hook.register_adapters.get_hookimpls()):

            def register(adapter: Any, _impl: pluggy.HookImpl = impl) -> None:
                for known, plugin in reg.adapters:
                    if known.name == adapter.name:
                        if _impl.trylast:
                            return
                        raise PluginError(
                            f"adapter {adapter.name!r} is registered by both plugin "
                            f"{plugin!r} and plugin {_impl.plugin_name!r}"
                        )
                reg.adapters.append((adapter, _impl.plugin_name))

            impl.function(register=register)

    def describe(self) -> list[dict[str, Any]]:
        """Each plugin: its name, distribution, version and the hooks it implements."""
        self.ensure_loaded()
        out: list[dict[str, Any]] = []
        for name, plugin in self.list_name_plugin():
            if plugin is None or name is None:
                continue
            hooks = sorted(caller.name for caller in (self.get_hookcallers(plugin) or ()))
            dist, version = self.distinfo.get(name, (None, None))
            if dist is None and name in CORE_PLUGINS:
                dist = DISTRIBUTION
            if version is None and dist == DISTRIBUTION:
                version = _version()
            out.append({"name": name, "distribution": dist, "version": version, "hooks": hooks})
        return out


def _gate(plugin: object) -> Callable[[], bool] | None:
    """The plugin's ``memory_adapters_active`` method, or ``None`` when it has none."""
    try:
        gate = getattr(plugin, ACTIVE, None)
    except Exception:  # a module's __getattr__ that raises something else: no gate
        return None
    return gate if callable(gate) else None


def _version() -> str | None:
    try:
        return md.version(DISTRIBUTION)
    except md.PackageNotFoundError:
        return None


def module_name(plugin: object) -> str:
    """A readable name for a plugin object."""
    if isinstance(plugin, ModuleType):
        return plugin.__name__
    return type(plugin).__name__


def register_all(pm: PluginManager, plugins: Iterable[object]) -> None:
    """Register extra plugins given to ``Memory(plugins=[...])``."""
    for plugin in plugins:
        pm.register(plugin)
