"""Moving a namespace's data: copy between any two stores, verify, export and import.

One core serves them all: :mod:`.records` reads a namespace as a stream of records (a
session's header, its events a page at a time, its end; each value with its records
and expiry), and :mod:`.intake` writes such a stream into a store, resumably. A copy
pipes the one into the other (:mod:`.copying`); an export writes the records as an
archive and an import reads them back (:mod:`.archive`).
"""

from __future__ import annotations

from .archive import ArchiveError, export_archive, import_archive
from .copying import CopyReport, NamespaceNotEmptyError, copy, verify

__all__ = [
    "ArchiveError",
    "CopyReport",
    "NamespaceNotEmptyError",
    "copy",
    "export_archive",
    "import_archive",
    "verify",
]
