"""Staff: accounts, roles per event, sessions, the audit log, sign-in through OpenID Connect (README.md)."""
