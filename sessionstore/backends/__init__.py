"""Storage backends. Each implements :mod:`sessionstore.contracts`; none makes decisions."""
