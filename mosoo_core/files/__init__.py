"""Files: the object store and file records (attachments callers upload, artifacts the agent
writes). Their delivery into sandboxes and collection after each run are the runtime's
(`runtime.attachments`, `runtime.artifacts`)."""

from mosoo_core.files.checkpoints import checkpoint_key, checkpoint_prefix, pet_checkpoint_key
from mosoo_core.files.names import media_type_for, sanitize_name
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
    "FileView",
    "FilesystemStore",
    "ObjectStore",
    "S3Store",
    "agent_object_keys",
    "bind_attachments",
    "blob_key",
    "checkpoint_key",
    "checkpoint_prefix",
    "delete_file",
    "get_file",
    "get_store",
    "iter_chunks",
    "list_files",
    "list_thread_files",
    "media_type_for",
    "open_file",
    "pet_checkpoint_key",
    "purge_after_commit",
    "purge_objects",
    "remove_thread_files",
    "sanitize_name",
    "sweep_files",
    "upload_file",
]
