"""Object storage (and, with the Files issue, file records, attachments and artifacts)."""

from mosoo_core.files.store import FilesystemStore, ObjectStore, S3Store, get_store, iter_chunks

__all__ = ["FilesystemStore", "ObjectStore", "S3Store", "get_store", "iter_chunks"]
