"""Run orchestration and the sandboxes runs execute in (see `mosoo_core.runtime.sandbox`)."""
