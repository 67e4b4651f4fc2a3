"""The type stubs (conveyor/_conveyor.pyi) describe the C++ half as built: the same classes,
methods, properties and functions, nothing missing on either side; and every public name of
the package has a docstring, so that help() explains it."""

import ast
import inspect
import os

import pytest

conveyor = pytest.importorskip(
    "conveyor", reason="the conveyor module is not built (needs pybind11-dev and python3-dev) or not on PYTHONPATH"
)
from conveyor import _conveyor  # noqa: E402


def stubs():
    path = os.path.join(os.path.dirname(conveyor.__file__), "_conveyor.pyi")
    with open(path) as f:
        tree = ast.parse(f.read())
    classes, functions = {}, set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            classes[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
        elif isinstance(node, ast.FunctionDef):
            functions.add(node.name)
    return classes, functions


def public(names):
    return {n for n in names if not n.startswith("_") or n in ("__init__", "__len__", "__dlpack__", "__dlpack_device__")}


def test_the_stubs_name_what_the_module_has():
    classes, functions = stubs()
    built_classes = {n for n, v in vars(_conveyor).items() if inspect.isclass(v)}
    built_functions = {n for n, v in vars(_conveyor).items() if callable(v) and not inspect.isclass(v) and not n.startswith("_")}
    assert set(classes) == built_classes
    assert functions == built_functions
    for name, members in classes.items():
        cls = getattr(_conveyor, name)
        if issubclass(cls, BaseException):
            continue
        built = public(n for n in dir(cls) if n in vars(cls)) - {"__init__"}
        assert public(members) - {"__init__"} == built, name


def test_every_public_name_has_a_docstring():
    for name in conveyor.__all__:
        obj = getattr(conveyor, name)
        if callable(obj):
            assert inspect.getdoc(obj), name
    for cls in (conveyor.Pipeline, conveyor.Epoch):
        for name, member in vars(cls).items():
            if not name.startswith("_") and (callable(member) or isinstance(member, property)):
                assert inspect.getdoc(member), f"{cls.__name__}.{name}"
