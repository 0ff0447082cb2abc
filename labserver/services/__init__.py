"""Service functions: what routes, the CLI and tests call. Keyword-only data helpers that take the
:class:`~labserver.services.context.AppContext` and a database session."""
