"""Mosoo's domain: services shared by the console, the public API, the CLI and the workers."""
