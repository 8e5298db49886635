"""The tokens file of ``memory-adapters mcp --http --tokens FILE``: bearer tokens mapped to
users, the built-in (``trylast``) implementation of the ``mcp_authenticate`` hook.

The file is a JSON object; each key is a token, or ``"sha256:"`` and the hex SHA-256 of one
(so the file need not hold the secret itself); each value is the user id, or an object with
``"user"`` and optionally ``"agent"`` and ``"namespace"``::

    {
      "sha256:5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8": "alice",
      "7H0DIq3wQ8Xk1pV6b-2RsmEa4Jc9LtZy": {"user": "bob", "agent": "cursor"}
    }

A token given in the clear must be at least :data:`MIN_TOKEN_LENGTH` characters. The file is
read again when it changes (its size or modification time), so tokens are added and revoked
without a restart; a change that does not parse is reported once and the last good contents
stay in force.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
from pathlib import Path
from typing import Any

from memory_adapters import Scope, hookimpl
from memory_adapters.errors import InvalidInput

log = logging.getLogger(__name__)

MIN_TOKEN_LENGTH = 16
"""The shortest token a tokens file may hold in the clear (``secrets.token_urlsafe(32)``
makes 43 characters)."""

_HASHED = re.compile(r"sha256:([0-9a-fA-F]{64})")

Entry = tuple[str, str | None, str | None]
"""A token's user, agent and namespace (``None``: the server's)."""


def digest(token: str) -> str:
    """The hex SHA-256 of a token (its UTF-8 bytes), as a tokens file may name it."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def _entry(where: str, value: object) -> Entry:
    if isinstance(value, str):
        value = {"user": value}
    if not isinstance(value, dict):
        raise InvalidInput(f"{where}: a user id or an object with 'user', not {value!r}")
    unknown = sorted(set(value) - {"user", "agent", "namespace"})
    if unknown:
        raise InvalidInput(f"{where}: unknown field(s) {', '.join(map(repr, unknown))}")
    user, agent, namespace = value.get("user"), value.get("agent"), value.get("namespace")
    for name, field in (("user", user), ("agent", agent), ("namespace", namespace)):
        if field is not None and not isinstance(field, str):
            raise InvalidInput(f"{where}: {name} must be a string")
    if not user:
        raise InvalidInput(f"{where}: no user")
    Scope(namespace=namespace or "default", user_id=user, agent_id=agent)  # checks the ids
    return user, agent, namespace


def parse(text: str, where: str = "tokens file") -> dict[str, Entry]:
    """The entries of a tokens file's text, by the SHA-256 of their token. Raises
    :class:`~memory_adapters.errors.InvalidInput` naming what is wrong (never the token)."""
    try:
        data: Any = json.loads(text)
    except ValueError as exc:
        raise InvalidInput(f"{where} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidInput(f"{where} must hold a JSON object of tokens")
    entries: dict[str, Entry] = {}
    for n, (key, value) in enumerate(data.items(), 1):
        at = f"{where}, entry {n}"
        hashed = _HASHED.fullmatch(key)
        if hashed is not None:
            key_digest = hashed.group(1).lower()
        elif key.startswith("sha256:"):
            raise InvalidInput(f"{at}: 'sha256:' must be followed by 64 hex digits")
        elif len(key) < MIN_TOKEN_LENGTH or key != key.strip():
            raise InvalidInput(
                f"{at}: a token must be at least {MIN_TOKEN_LENGTH} characters, without "
                "surrounding spaces (python -c 'import secrets; print(secrets.token_urlsafe(32))')"
            )
        else:
            key_digest = digest(key)
        if key_digest in entries:
            raise InvalidInput(f"{at}: the same token twice")
        entries[key_digest] = _entry(at, value)
    return entries


class TokenFile:
    """Bearer tokens from a JSON file (see the module docstring), as an ``mcp_authenticate``
    plugin: ``Memory(url, plugins=[TokenFile(path)])``. Raises
    :class:`~memory_adapters.errors.InvalidInput` when the file cannot be read or does not
    parse.

    Read again when its size or modification time changes: a change that does not parse is
    logged and the tokens read before stay in force; a file that is gone holds no tokens
    (every request is refused until it is back)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._stamp = self._stat()
        if self._stamp is None:
            raise InvalidInput(f"tokens file {str(self.path)!r} cannot be read")
        self._entries = self._read()

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size

    def _read(self) -> dict[str, Entry]:
        where = f"tokens file {str(self.path)!r}"
        try:
            text = self.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidInput(f"{where}: {exc}") from None
        return parse(text, where)

    def _fresh(self) -> dict[str, Entry]:
        """The entries, read again first if the file changed."""
        with self._lock:
            stamp = self._stat()
            if stamp == self._stamp:
                return self._entries
            self._stamp = stamp
            if stamp is None:
                log.warning("tokens file %r is gone: every request is refused", str(self.path))
                self._entries = {}
                return self._entries
            try:
                self._entries = self._read()
            except InvalidInput as exc:
                log.warning("%s; the tokens read before stay in force", exc)
            return self._entries

    def __len__(self) -> int:
        return len(self._fresh())

    @hookimpl(trylast=True)
    def mcp_authenticate(self, token: str, namespace: str) -> Scope | None:
        """The scope of ``token``'s entry (its namespace, else ``namespace``), or ``None``."""
        entry = self._fresh().get(digest(token))
        if entry is None:
            return None
        user, agent, ns = entry
        return Scope(namespace=ns or namespace, user_id=user, agent_id=agent)
