"""The builders' keywords and the description's keys are the C++ option structs' field names
(described once with Boost.Describe): an unknown keyword is refused naming the valid ones, a
bad value names the key, and every keyword of a builder is a field of its section's struct
or in the one alias table (conveyor._ALIASES)."""

import inspect

import pytest

conveyor = pytest.importorskip(
    "conveyor", reason="the conveyor module is not built (needs pybind11-dev and python3-dev) or not on PYTHONPATH"
)
from conveyor import _conveyor  # noqa: E402


def test_an_unknown_keyword_is_refused_naming_the_valid_ones():
    pipe = conveyor.files(paths=["a.jpg"]).decode(32)
    with pytest.raises(TypeError, match=r'unknown key "capacty"; valid keys: size, layout, type, mean, std, partial, capacity, slabs'):
        pipe.batch(4, capacty=2)
    with pytest.raises(TypeError, match=r'unknown key "stric".*valid keys: decode, fields, label_field'):
        conveyor.files(paths=["a.jpg"]).decode(32, stric=False)
    with pytest.raises(TypeError, match=r'unknown key "initail"; valid keys: buffer, initial, seed'):
        conveyor.files(paths=["a.jpg"]).shuffle(10, initail=3)


def test_further_fields_are_taken_by_their_names_and_checked():
    pipe = conveyor.files(paths=["a.jpg"]).shuffle(10, initial=5).decode(32, strict=False, concurrency=3).batch(4, capacity=1, slabs=4)
    assert pipe._spec["shuffle"]["initial"] == 5
    assert pipe._spec["decode"]["decode"]["strict"] is False
    assert pipe._spec["decode"]["concurrency"] == 3
    assert pipe._spec["collate"]["slabs"] == 4
    with pytest.raises(ValueError, match=r"slabs: expected an integer in \[0, "):
        conveyor.files(paths=["a.jpg"]).decode(32).batch(4, slabs=-1)
    with pytest.raises(ValueError, match=r"jpeg_crop: expected one of decode_region, decode_then_crop, transform_then_decode"):
        conveyor.files(paths=["a.jpg"]).decode(32, jpeg_crop="fast")


def test_every_keyword_of_a_builder_is_a_field_of_its_struct_or_an_alias():
    fields = {role: set(_conveyor.option_fields(role)) for role in ("order", "source", "s3", "shard", "cache", "shuffle", "decode", "decode_options", "collate")}
    aliases = conveyor._ALIASES
    for role, table in aliases.items():
        if role in fields:
            assert {field.split(".")[0] for field in table.values()} <= fields[role], role

    # Keywords that are no option struct's field: the envelope the binding itself reads.
    # (decoders=: Python callables, run by the binding's Python stages, not by a C++ struct.)
    envelope = {"threads", "rank", "world_size", "urls", "label_map", "self", "options", "on_error", "device", "decoders"}

    def check(fn, roles):
        known = set().union(*(fields[r] for r in roles)) | set().union(*(aliases.get(r, {}).keys() for r in roles)) | envelope
        for name in inspect.signature(fn).parameters:
            assert name in known, f"{fn.__name__}({name}=) is no field of {roles} and no alias"

    check(conveyor.files, ["source", "order"])
    check(conveyor.s3, ["source", "order", "s3", "cache"])
    check(conveyor.shards, ["order", "shard", "cache", "s3"])
    check(conveyor.Pipeline.shuffle, ["shuffle"])
    check(conveyor.Pipeline.decode, ["decode", "decode_options"])
    check(conveyor.Pipeline.batch, ["collate"])
    try:
        fields["to_cuda"] = set(_conveyor.option_fields("to_cuda"))
    except ValueError:
        return  # a build without CUDA
    check(conveyor.Pipeline.to_cuda, ["to_cuda"])
