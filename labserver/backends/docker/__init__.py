"""The Docker backend, one module per idea: ``backend.py`` (:class:`DockerBackend`), ``engines.py``
(clients, thread pool, listing, usage, placement lock and the one make / wait-ready / seed path),
``config.py`` (pure container configs), ``files.py``, ``terminal.py``, ``grader.py`` +
``grader_runner.py`` (tamper-proof checks), ``scheduler.py`` (placement), ``warmpool.py``,
``images.py`` (offline image builds) and ``state.py`` (the typed ``EnvRef.data``)."""
