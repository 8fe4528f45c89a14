"""The owner's terminal: xterm.js (`@xterm/xterm`, sized by `@xterm/addon-fit`) wrapped as a
Reflex component. Its React side, `terminal.jsx` beside this file, opens the websocket at
`path` (mosoo_web/api/terminal.py) when it mounts and closes it when it unmounts."""

from __future__ import annotations

from typing import Any

import reflex as rx

# Shipped with the app (rx.asset, shared: the file sits beside this module).
_SOURCE = rx.asset("terminal.jsx", shared=True)


class Terminal(rx.NoSSRComponent):
    """xterm.js on the websocket at `path` (browser only: it measures its box)."""

    library = _SOURCE.importable_path
    tag = "MosooTerminal"
    lib_dependencies: list[str] = ["@xterm/xterm@6.0.0", "@xterm/addon-fit@0.11.0"]

    path: rx.Var[str]


def terminal(path: rx.Var[str] | str, **props: Any) -> rx.Component:
    """The terminal of the websocket at `path`, filling its box (give it a height)."""
    return Terminal.create(path=path, **props)
