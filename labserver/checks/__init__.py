"""Checking a step: the verdict table (``verdict.py``), the one builder of a check request and its
``LAB_*`` variables (``request.py``) and the lab self-test (``selftest.py``)."""
