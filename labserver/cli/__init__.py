"""The ``labserver`` command. The typer app is :data:`labserver.cli.main.app`; each sub-command
group has its module (``check``, ``env``, ``images``, ``selfpaced``), imported and mounted
explicitly by ``main.py`` so a broken import fails the start loudly."""
