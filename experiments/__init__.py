"""Reproductions of the papers' experiments: scripts run as ``python experiments/<name>.py`` (see README.md)."""
