"""``python -m sessionstore`` runs the ``sessionstore`` command."""

from .cli import main

main()
