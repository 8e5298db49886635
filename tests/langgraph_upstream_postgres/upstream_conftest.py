"""What the vendored ``test_store.py`` imports from LangGraph's ``tests/conftest.py``
(``langgraph-checkpoint-postgres``): the names, not the database (the fixtures that use
``DEFAULT_URI`` are replaced by ``conftest.py``)."""

from .embed_test_utils import CharacterEmbeddings

DEFAULT_URI = "postgres://unused/postgres"
"""Never connected to: the vendored fixtures that would are replaced."""

VECTOR_TYPES = ["vector", "halfvec"]

__all__ = ["DEFAULT_URI", "VECTOR_TYPES", "CharacterEmbeddings"]
