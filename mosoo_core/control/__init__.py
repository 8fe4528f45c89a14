"""The control service: the endpoint sandboxes' drivers dial back to."""
