"""Events and joining: join codes, personal codes, event administration, the join list (README.md)."""
