"""The documentation site builds with no broken link, and its API reference is complete.

The site (``mkdocs.yml``) is built once here with ``--strict``; every name of the ``__all__`` of
the core and of each built-in plugin must have an entry in the built site's inventory
(``objects.inv``, which mkdocstrings writes for every object it rendered).
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml
from mkdocstrings import Inventory

from memory_adapters import docgen
from memory_adapters.plugins import BUILTIN_PLUGINS

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The built site: ``$MEMORY_ADAPTERS_SITE_DIR`` when CI has just built it from this
    checkout with ``--strict``, else built here."""
    built = os.environ.get("MEMORY_ADAPTERS_SITE_DIR")
    if built:
        assert (Path(built) / "objects.inv").exists(), f"{built} holds no built site"
        yield Path(built)
        return
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr[-6000:]
    yield out


def test_reference_covers_the_core_and_every_builtin_plugin() -> None:
    assert docgen.reference_modules() == ["memory_adapters", *BUILTIN_PLUGINS.values()]
    for module in docgen.reference_modules():
        assert docgen.public_names(module) == list(importlib.import_module(module).__all__)


def test_every_public_name_has_a_reference_entry(site: Path) -> None:
    with (site / "objects.inv").open("rb") as file:
        inventory = Inventory.parse_sphinx(file)
    missing = [
        f"{module}.{name}"
        for module in docgen.reference_modules()
        for name in docgen.public_names(module)
        if f"{module}.{name}" not in inventory
    ]
    assert not missing, f"no reference entry for {missing}"
    for module in docgen.reference_modules():
        page = site / "reference" / module / "index.html"
        assert f'id="{module}.{docgen.public_names(module)[0]}"' in page.read_text("utf-8")


def test_every_page_is_in_the_navigation(site: Path) -> None:
    """Each Markdown page of docs/ is listed in mkdocs.yml's nav (the reference pages are
    added by mkdocs_hooks.py), so none is reachable only by its address."""
    config = yaml.load((ROOT / "mkdocs.yml").read_text("utf-8"), Loader=yaml.BaseLoader)

    def pages(items: object) -> Iterator[str]:
        if isinstance(items, str):
            yield items
        elif isinstance(items, list):
            for item in items:
                yield from pages(item)
        elif isinstance(items, dict):
            for value in items.values():
                yield from pages(value)

    listed = set(pages(config["nav"]))
    on_disk = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert on_disk - listed == set(), "pages missing from mkdocs.yml's nav"
    for page in listed:
        stem = page.removesuffix(".md").removesuffix("index").rstrip("/")
        assert (site / stem / "index.html").exists(), f"{page} was not built"


RECIPE_EXAMPLE = re.compile(r"python (examples/\w+\.py)")


def _code_text(page: str) -> str:
    """The text of a built page's code blocks, highlighting markup removed."""

    class Code(HTMLParser):
        def __init__(self) -> None:
            super().__init__(convert_charrefs=True)
            self.depth = 0
            self.parts: list[str] = []

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if tag == "code":
                self.depth += 1

        def handle_endtag(self, tag: str) -> None:
            if tag == "code" and self.depth:
                self.depth -= 1
                self.parts.append("\n")

        def handle_data(self, data: str) -> None:
            if self.depth:
                self.parts.append(data)

    parser = Code()
    parser.feed(page)
    return "".join(parser.parts)


def test_every_recipe_page_shows_the_code_of_its_example(site: Path) -> None:
    """A recipe page that runs ``python examples/X.py`` includes X's code at build time
    (``--8<-- "examples/X.py"``, pymdownx.snippets); the built page holds every line of it.

    The include sits between ``<!-- fmt: off -->`` and ``<!-- fmt: on -->``: ``ruff format``
    formats Python blocks in Markdown and would turn it into ``--8 < --"examples/X.py"``,
    which the site shows as that literal line."""
    checked = []
    for source in sorted((ROOT / "docs" / "recipes").glob("*.md")):
        text = source.read_text("utf-8")
        assert "--8 <" not in text, f"{source.name}: a mangled snippet include"
        match = RECIPE_EXAMPLE.search(text)
        if not match:
            continue
        example = (ROOT / match.group(1)).read_text("utf-8")
        built = (site / "recipes" / source.stem / "index.html").read_text("utf-8")
        code = _code_text(built)
        missing = [line for line in example.splitlines() if line.strip() not in code]
        assert not missing, f"{source.name} does not show {match.group(1)}: {missing[:3]}"
        assert "--8<--" not in code, f"{source.name} shows a snippet include line"
        checked.append(source.name)
    assert len(checked) >= 6, checked
