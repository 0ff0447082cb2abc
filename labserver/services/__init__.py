"""Service functions: what routes, the CLI and tests call. Keyword-only data helpers that take the
:class:`~labserver.services.context.AppContext` and a database session, grouped in areas that import
only the areas below them (README.md; ``tests/test_architecture.py``, ``SERVICE_AREAS``)."""
