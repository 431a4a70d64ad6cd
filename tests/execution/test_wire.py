"""The plain-data codec: exact round trips for honest values, only built-in types out of the decoder,
and a clear error for anything malformed."""

from __future__ import annotations

import collections
import enum
import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rewardpipe.execution.runtime import wire

hashable = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text() | st.binary(),
    lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3),
    max_leaves=8,
)
plain = st.recursive(
    hashable,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(hashable, inner, max_size=4)
        | st.sets(hashable, max_size=4)
        | st.tuples(inner, inner)
    ),
    max_leaves=20,
)


def same_structure(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_structure(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_structure(a[k], b[k]) for k in a)
    return a == b


@settings(max_examples=150, deadline=None)
@given(plain)
def test_plain_values_survive_encode_json_decode(value):
    text = json.dumps(wire.encode(value))
    assert same_structure(wire.decode(json.loads(text)), value)


def test_other_builtin_subclasses_become_their_base_type():
    class Colour(enum.IntEnum):
        RED = 1

    class Mine(dict):
        pass

    decoded = [wire.decode(wire.encode(v)) for v in (Colour.RED, Mine(a=1), collections.defaultdict(lambda: 7, a=1))]
    assert decoded == [1, {"a": 1}, {"a": 1}]
    assert [type(v) for v in decoded] == [int, dict, dict]  # (a defaultdict of a lambda: its default stays behind)


def test_the_standard_collections_keep_their_type():
    point = collections.namedtuple("Point", "x y")(1, [2])
    counts = collections.Counter("abracadabra")
    ordered = collections.OrderedDict([("b", 1), ("a", 2)])
    grouped = collections.defaultdict(list, {"k": [1]})
    queue = collections.deque([1, 2, 3], maxlen=5)
    got_point, got_counts, got_ordered, got_grouped, got_queue = (
        wire.decode(json.loads(json.dumps(wire.encode(v)))) for v in (point, counts, ordered, grouped, queue)
    )
    assert (got_point.x, got_point.y, type(got_point).__name__, got_point._fields) == (1, [2], "Point", ("x", "y"))
    assert got_point == (1, [2])
    assert got_counts.most_common(2) == [("a", 5), ("b", 2)]
    assert got_ordered == ordered and got_ordered != collections.OrderedDict([("a", 2), ("b", 1)])
    assert got_grouped["missing"] == [] and got_grouped["k"] == [1]
    assert got_queue.popleft() == 1 and got_queue.maxlen == 5


@pytest.mark.parametrize(
    "tree",
    [
        {"nt": ["P", ["x", "import os"], [1, 2]]},  # a field that is no identifier
        {"nt": ["P", ["x", "class"], [1, 2]]},  # a keyword
        {"nt": ["P", ["_x"], [1]]},  # private
        {"nt": ["P", ["x", "x"], [1, 2]]},  # repeated
        {"nt": ["os.system('id')", ["x"], [1]]},  # a name that is no identifier
        {"nt": ["P", ["x"], [1, 2]]},  # more items than fields
        {"dd": ["eval", []]},  # a factory that is not a built-in type
        {"dd": [{"h": 1}, []]},
        {"dq": [[1], -1]},
        {"dq": [[1], "5"]},
    ],
)
def test_collections_the_trusted_side_could_not_build_safely_are_refused(tree):
    with pytest.raises(wire.WireError):
        wire.decode(tree)


def test_objects_need_a_handle_table():
    with pytest.raises(wire.Unencodable, match="object"):
        wire.encode(object())
    handles = []
    tree = wire.encode([1, object()], make_handle=lambda obj: handles.append(obj) or len(handles))
    assert tree == {"l": [1, {"h": 1}]}


@pytest.mark.parametrize(
    "tree, message",
    [
        ({"zz": 1}, "unknown value tag"),
        ({"l": 1}, "expected a list"),
        ({"d": [[{"l": []}, 1]]}, "malformed 'd' value"),
        ({"b": "@@not base64@@"}, "malformed 'b' value"),
        ({"h": 3}, "unexpected object handle"),
        ({"l": [], "t": []}, "malformed value"),
        ([1, 2], "malformed value of type list"),
    ],
)
def test_malformed_trees_raise_wire_error(tree, message):
    with pytest.raises(wire.WireError, match=message):
        wire.decode(tree)


def test_deep_nesting_is_refused_both_ways():
    deep = []
    for _ in range(300):
        deep = [deep]
    with pytest.raises(wire.Unencodable, match="nested"):
        wire.encode(deep)
    tree = 1
    for _ in range(300):
        tree = {"l": [tree]}
    with pytest.raises(wire.WireError, match="nested"):
        wire.decode(tree)


def test_frames_round_trip_and_oversized_frames_are_refused():
    read_end, write_end = os.pipe()
    try:
        wire.send_json(write_end, {"op": "call", "args": [1, "x"]})
        assert wire.recv_json(read_end) == {"op": "call", "args": [1, "x"]}
        wire.send_frame(write_end, b"x" * 100)
        with pytest.raises(wire.WireError, match="exceeds"):
            wire.recv_frame(read_end, limit=10)
    finally:
        os.close(read_end)
        os.close(write_end)


def test_closed_channel_raises_peer_closed():
    read_end, write_end = os.pipe()
    os.write(write_end, b"\x00\x00")
    os.close(write_end)
    with pytest.raises(wire.PeerClosed):
        wire.recv_frame(read_end)
    os.close(read_end)
