"""fixpack.structs: records declared like dataclasses, with the behaviour the code relies on."""

from __future__ import annotations

import copy
import pickle

import pytest

from fixpack.structs import FrozenInstanceError, field, replace, struct


@struct(frozen=True)
class Point:
    x: int
    y: int = 0
    tags: tuple[str, ...] = ()


@struct
class Bag:
    name: str
    items: list[int] = field(default_factory=list)
    hidden: str = field(default="h", repr=False)
    _cache: dict | None = None


def test_arguments_by_position_and_name_with_defaults():
    assert (Point(1).x, Point(1).y) == (1, 0)
    p = Point(1, y=2, tags=("a",))
    assert (p.x, p.y, p.tags) == (1, 2, ("a",))
    assert Point(y=3, x=4) == Point(4, 3)
    for bad in (lambda: Point(), lambda: Point(1, 2, (), 4), lambda: Point(1, z=2), lambda: Point(1, x=1)):
        with pytest.raises(TypeError):
            bad()


def test_frozen_equal_hashable_and_not_assignable():
    p = Point(1, 2)
    assert p == Point(1, 2) and p != Point(2, 1) and hash(p) == hash(Point(1, 2))
    assert {p: 1}[Point(1, 2)] == 1
    assert p != (1, 2, ())  # a struct is not a tuple
    with pytest.raises(FrozenInstanceError):
        p.x = 5  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del p.y  # type: ignore[misc]


def test_mutable_factories_repr_and_caches():
    a, b = Bag("a"), Bag("a")
    a.items.append(1)
    assert b.items == []  # each instance its own list
    assert a != b and Bag("x", [1]) == Bag("x", [1])
    a._cache = {"k": "v"}  # a cache is not compared
    b.items.append(1)
    assert a == b
    assert repr(a) == "Bag(name='a', items=[1])"
    with pytest.raises(TypeError):
        hash(a)  # mutable and compared: unhashable, as a dataclass
    a.name = "renamed"
    assert a.name == "renamed"


def test_replace_copy_and_pickle():
    p = Point(1, 2, ("t",))
    assert replace(p, y=5) == Point(1, 5, ("t",)) and p.y == 2
    assert copy.copy(p) == p and copy.deepcopy(p) == p
    assert pickle.loads(pickle.dumps(p)) == p
    bag = pickle.loads(pickle.dumps(Bag("n", [3])))
    assert bag == Bag("n", [3])


def test_a_field_without_a_default_after_one_with_is_refused():
    with pytest.raises(TypeError, match="without a default"):

        @struct
        class Wrong:
            a: int = 1
            b: int
