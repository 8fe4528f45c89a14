"""Reflex APIs as mypy can see them: `event` (Reflex's `rx.event`), `cond_value` (the value
form of `rx.cond`), `match_component` and `match_value` (`rx.match` between components, and
between values). At runtime they are Reflex's own objects, unchanged.

Reflex types these for pyright, or loosely, in ways mypy cannot use:
- `rx.event` is a class whose `__new__` returns the decorated handler typed as an
  `EventCallback`; mypy ignores a `__new__` that returns something other than an instance,
  so under mypy every decorated handler would be an `EventNamespace`, not callable.
- `rx.cond`'s overloads are split by the `TypeVar` definitions between them: mypy keeps only
  the first group (a component in a branch), so a conditional value (`rx.cond(flag, "a",
  "b")`) would match no overload.
- `rx.match` returns `Component | Var` whatever its cases: with a component in every case
  (and as the default) it returns the component that switches between them, with values
  the Var that picks one.

Below are the signatures Reflex declares (or, for `rx.match`, implements), restated.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, TypeVarTuple, overload

import reflex as rx
from reflex.event import EventCallback
from reflex.vars import Var

__all__ = ["cond_value", "event", "match_component", "match_value"]

P = TypeVarTuple("P")
T = TypeVar("T")
U = TypeVar("U")

if TYPE_CHECKING:

    @overload
    def event(func: Callable[[Any, *P], Any], /) -> EventCallback[*P]: ...

    @overload
    def event(
        func: None = None,
        /,
        *,
        background: bool | None = None,
        supersedes: bool | None = None,
        stop_propagation: bool | None = None,
        prevent_default: bool | None = None,
        throttle: int | None = None,
        debounce: int | None = None,
        temporal: bool | None = None,
    ) -> Callable[[Callable[[Any, *P], Any]], EventCallback[*P]]: ...

    def event(func: Any = None, /, **actions: Any) -> Any:
        """Reflex's `rx.event`: makes `func` an event handler of its state."""

    @overload
    def cond_value(condition: Any, if_true: Var[T], if_false: Var[U], /) -> Var[T | U]: ...

    @overload
    def cond_value(condition: Any, if_true: T, if_false: Var[U], /) -> Var[T | U]: ...

    @overload
    def cond_value(condition: Any, if_true: Var[T], if_false: U, /) -> Var[T | U]: ...

    @overload
    def cond_value(condition: Any, if_true: T, if_false: U, /) -> Var[T | U]: ...

    def cond_value(condition: Any, if_true: Any, if_false: Any, /) -> Any:
        """Reflex's `rx.cond` with two values (not components): `if_true` while
        `condition` holds in the browser, else `if_false`."""

    def match_component(
        condition: Any, *cases: tuple[Any, rx.Component] | rx.Component
    ) -> rx.Component:
        """Reflex's `rx.match` with components: the case whose value `condition` equals
        (each `(value, component)`), else the last, bare component."""

    def match_value(condition: Any, *cases: tuple[Any, T] | T) -> Var[T]:
        """Reflex's `rx.match` with values (not components): the value of the case whose
        value `condition` equals (each `(value, result)`), else the last, bare value."""

else:
    event = rx.event
    cond_value = rx.cond
    match_component = match_value = rx.match
