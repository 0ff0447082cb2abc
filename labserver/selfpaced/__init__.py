"""Self-paced mode: the learner on a laptop (``learner.py``), the loopback server
(``server.py``) and the offline wheels (``packaging.py``)."""
