"""Records declared like dataclasses, for the classes every container start defines.

``dataclasses`` writes each class's methods as source text and compiles them when the class is
defined: about a millisecond a class on Python 3.11, a third of the cold ``apply_all.py``'s own
time across the records on its path (and 8 ms more to import ``dataclasses`` and ``inspect``).
:func:`struct` reads the same declaration (annotated fields, defaults, :func:`field`) and gives
the class shared generic methods instead: ``__init__`` taking the fields by position or name,
``__repr__``, ``__eq__`` (same class, equal fields) and, for ``frozen=True``, ``__hash__`` and no
assignment. Fields whose name starts with ``_`` (caches) are left out of the repr and of equality.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

try:
    from typing import dataclass_transform
except ImportError:  # Python 3.10: type checkers then read struct as a plain decorator

    def dataclass_transform(**_: Any) -> Callable[[Any], Any]:  # type: ignore[no-redef]
        return lambda f: f


__all__ = ["FrozenInstanceError", "field", "replace", "struct"]

T = TypeVar("T")
_MISSING: Any = object()


class FrozenInstanceError(AttributeError):
    """An assignment to a field of a frozen struct."""


class _Field:
    __slots__ = ("default", "factory", "shown")

    def __init__(self, default: Any, factory: Callable[[], Any] | None, shown: bool) -> None:
        self.default, self.factory, self.shown = default, factory, shown


def field(default: Any = _MISSING, *, default_factory: Callable[[], Any] | None = None, repr: bool = True) -> Any:
    """A field's default (``default_factory``: made anew for each instance) and whether it is shown."""
    return _Field(default, default_factory, repr)


@dataclass_transform(field_specifiers=(field,))
def struct(cls: type[T] | None = None, *, frozen: bool = False) -> Any:
    """``@struct`` or ``@struct(frozen=True)`` on a class of annotated fields."""

    def wrap(cls: type[T]) -> type[T]:
        return _make(cls, frozen)

    return wrap if cls is None else wrap(cls)


def replace(obj: T, **changes: Any) -> T:
    """A copy of ``obj`` with some fields changed."""
    values = {name: getattr(obj, name) for name in obj.__struct_fields__}  # type: ignore[attr-defined]
    values.update(changes)
    return type(obj)(**values)


def _make(cls: type[T], frozen: bool) -> type[T]:
    names = tuple(cls.__dict__.get("__annotations__", {}))
    defaults: dict[str, Any] = {}  # name -> value, or the _Field whose factory makes it
    shown = []
    for name in names:
        value = cls.__dict__.get(name, _MISSING)
        visible = True
        if isinstance(value, _Field):
            visible = value.shown
            if value.factory is not None:
                defaults[name] = value
                delattr(cls, name)
            elif value.default is _MISSING:
                delattr(cls, name)
            else:
                defaults[name] = value.default
                setattr(cls, name, value.default)
        elif value is not _MISSING:
            defaults[name] = value
        if name not in defaults and defaults:
            raise TypeError(f"{cls.__name__}: field {name!r} without a default follows one with a default")
        if visible and not name.startswith("_"):
            shown.append(name)
    compared = tuple(n for n in names if not n.startswith("_"))
    cls.__struct_fields__ = names  # type: ignore[attr-defined]
    cls.__init__ = _init(cls.__name__, names, defaults)  # type: ignore[misc]
    cls.__repr__ = _repr(tuple(shown))  # type: ignore[method-assign]
    cls.__eq__ = _eq(compared)  # type: ignore[method-assign]
    if frozen:
        cls.__hash__ = lambda self: hash(tuple(getattr(self, n) for n in compared))  # type: ignore[method-assign]
        cls.__setattr__ = _refuse  # type: ignore[method-assign]
        cls.__delattr__ = _refuse  # type: ignore[method-assign]
    else:
        cls.__hash__ = None  # type: ignore[assignment]  # as dataclasses: mutable and compared, so unhashable
    return cls


def _init(owner: str, names: tuple[str, ...], defaults: dict[str, Any]) -> Callable[..., None]:
    index = set(names)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) > len(names):
            raise TypeError(f"{owner}() takes {len(names)} arguments but {len(args)} were given")
        for name in kwargs:
            if name not in index:
                raise TypeError(f"{owner}() got an unexpected keyword argument {name!r}")
        setter = object.__setattr__
        for i, name in enumerate(names):
            if i < len(args):
                if name in kwargs:
                    raise TypeError(f"{owner}() got multiple values for argument {name!r}")
                value = args[i]
            elif name in kwargs:
                value = kwargs[name]
            elif name in defaults:
                value = defaults[name]
                if isinstance(value, _Field):
                    value = value.factory()  # type: ignore[misc]
            else:
                raise TypeError(f"{owner}() missing required argument {name!r}")
            setter(self, name, value)

    return __init__


def _repr(shown: tuple[str, ...]) -> Callable[[Any], str]:
    def __repr__(self: Any) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in shown)
        return f"{type(self).__qualname__}({inner})"

    return __repr__


def _eq(compared: tuple[str, ...]) -> Callable[[Any, object], Any]:
    def __eq__(self: Any, other: object) -> Any:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in compared)

    return __eq__


def _refuse(self: Any, name: str, *_: Any) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r} of a frozen {type(self).__name__}")
