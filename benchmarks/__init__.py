"""Speed benchmarks of ppl-sbl: scripts run as ``python benchmarks/<name>.py`` (see README.md)."""
