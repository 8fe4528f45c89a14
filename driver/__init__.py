"""The Mosoo driver: the only process of ours inside a sandbox. It dials the control
service, runs the agent backend and streams everything it does. It imports nothing from
mosoo_core; `driver.protocol` is the one definition of the wire messages both sides use."""

__version__ = "0.1.0"
