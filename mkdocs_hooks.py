"""MkDocs hooks of the documentation site (``mkdocs.yml``: ``hooks:``).

The API reference is generated, never written by hand: before the build reads the pages, this
adds one page per public module from :func:`memory_adapters.docgen.reference_pages` (each a
mkdocstrings ``:::`` block listing the module's ``__all__``); when the configuration is read,
it lists them in the navigation's "API reference" section after its index.
"""

from __future__ import annotations

from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

from memory_adapters import docgen

REFERENCE_SECTION = "API reference"


def on_files(files: Files, config: MkDocsConfig, **_: Any) -> Files:
    """Add the generated reference pages to the site's files."""
    for path, text in docgen.reference_pages().items():
        files.append(File.generated(config, path, content=text))
    return files


def on_config(config: MkDocsConfig, **_: Any) -> MkDocsConfig:
    """List the generated module pages in the nav's "API reference" section, after its index."""
    for item in config.nav or []:
        if isinstance(item, dict) and REFERENCE_SECTION in item:
            section = item[REFERENCE_SECTION]
            listed = {next(iter(e.values())) if isinstance(e, dict) else e for e in section}
            for module in docgen.reference_modules():
                path = f"{docgen.REFERENCE_DIR}/{module}.md"
                if path not in listed:
                    section.append({module: path})
            return config
    raise RuntimeError(f"mkdocs.yml's nav needs a {REFERENCE_SECTION!r} section")
