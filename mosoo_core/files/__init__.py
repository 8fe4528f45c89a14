"""Files: the object store, file records (attachments callers upload, artifacts the agent
writes), their delivery into sandboxes and their collection after each run."""

from mosoo_core.files._artifacts import OUTPUTS_DIR, record_artifacts
from mosoo_core.files._delivery import (
    attachment_path,
    deliver_attachments,
    remove_attachments,
    remove_stale_attachments,
)
from mosoo_core.files._names import media_type_for, sanitize_name
from mosoo_core.files.service import (
    MAX_ATTACHMENTS_PER_MESSAGE,
    MAX_ATTACHMENTS_PER_THREAD,
    MAX_FILE_BYTES,
    FileView,
    agent_object_keys,
    bind_attachments,
    blob_key,
    delete_file,
    get_file,
    list_files,
    list_thread_files,
    open_file,
    purge_after_commit,
    purge_objects,
    remove_thread_files,
    sweep_files,
    upload_file,
)
from mosoo_core.files.store import FilesystemStore, ObjectStore, S3Store, get_store, iter_chunks

__all__ = [
    "MAX_ATTACHMENTS_PER_MESSAGE",
    "MAX_ATTACHMENTS_PER_THREAD",
    "MAX_FILE_BYTES",
    "OUTPUTS_DIR",
    "FileView",
    "FilesystemStore",
    "ObjectStore",
    "S3Store",
    "agent_object_keys",
    "attachment_path",
    "bind_attachments",
    "blob_key",
    "delete_file",
    "deliver_attachments",
    "get_file",
    "get_store",
    "iter_chunks",
    "list_files",
    "list_thread_files",
    "media_type_for",
    "open_file",
    "purge_after_commit",
    "purge_objects",
    "record_artifacts",
    "remove_attachments",
    "remove_stale_attachments",
    "remove_thread_files",
    "sanitize_name",
    "sweep_files",
    "upload_file",
]
