"""Builds the conveyor Python package for pip and `python -m build` (pyproject.toml): the
module conveyor._conveyor, compiled by the project's own CMake build (target
conveyor_python, python/CMakeLists.txt), beside python/conveyor/'s files (__init__.py, the
type stubs _conveyor.pyi, py.typed).

The package's version is the headers' (include/conveyor/version.hpp), read here as the
top-level CMakeLists.txt reads it; the module exposes the same macro as conveyor.__version__.

Environment:
  CONVEYOR_BUILD_DIR          a configured CMake build folder of this source tree (e.g.
                              build/default): its conveyor_python target is brought up to date
                              and that module packaged, instead of a build of its own. It must
                              be built for an interpreter with this one's ABI (EXT_SUFFIX).
  CMAKE_ARGS                  more options for the build of its own (after the defaults, so
                              they win: -DCMAKE_BUILD_TYPE=RelWithDebInfo, -DCONVEYOR_WITH_CUDA=OFF,
                              -DCMAKE_INTERPROCEDURAL_OPTIMIZATION=ON).
  CMAKE_BUILD_PARALLEL_LEVEL  compile jobs (CMake reads it; `build_ext -j N` also sets them).
  CMAKE_GENERATOR             the generator (default: Ninja where it is found).
The build of its own lives in build/pip/ (CONVEYOR_BUILD_DIR/pip/ with CONVEYOR_BUILD_DIR),
so that a second install recompiles only what changed; ccache is the compiler launcher
where it is found.
"""

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import setuptools
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def conveyor_version():
    text = (ROOT / "include" / "conveyor" / "version.hpp").read_text()
    parts = []
    for part in ("MAJOR", "MINOR", "PATCH"):
        m = re.search(rf"^#define CONVEYOR_VERSION_{part} ([0-9]+)\s*$", text, re.M)
        if m is None:
            raise RuntimeError(f"include/conveyor/version.hpp defines no CONVEYOR_VERSION_{part}")
        parts.append(m.group(1))
    return ".".join(parts)


def given_build_dir():
    given = os.environ.get("CONVEYOR_BUILD_DIR")
    return Path(given).resolve() if given else None


def cache_entry(build_dir, name):
    """The value of `name` in build_dir's CMakeCache.txt, or None."""
    cache = build_dir / "CMakeCache.txt"
    if not cache.is_file():
        return None
    m = re.search(rf"^{re.escape(name)}:[A-Z]+=(.*)$", cache.read_text(errors="replace"), re.M)
    return m.group(1) if m else None


class cmake_build_ext(build_ext):
    """build_ext for the one extension: CMake configures and builds conveyor_python, and the
    module it writes (<build>/python/conveyor/_conveyor<EXT_SUFFIX>) is copied where
    setuptools packages it."""

    def build_extension(self, ext):
        cmake = shutil.which("cmake")
        if cmake is None:
            raise RuntimeError("conveyor: building the module needs CMake >= 3.25 on PATH (Debian: cmake)")
        given = given_build_dir()
        if given is not None:
            if cache_entry(given, "CMAKE_HOME_DIRECTORY") is None:
                raise RuntimeError(f"conveyor: CONVEYOR_BUILD_DIR={given} is not a configured CMake build folder")
            if Path(cache_entry(given, "CMAKE_HOME_DIRECTORY")).resolve() != ROOT:
                raise RuntimeError(f"conveyor: CONVEYOR_BUILD_DIR={given} is a build of another source tree, not {ROOT}")
            build_dir = given
        else:
            build_dir = Path(self.build_temp).resolve() / "cmake"
            self.configure(cmake, build_dir)
        if cache_entry(build_dir, "pybind11_DIR") in (None, "pybind11_DIR-NOTFOUND"):
            raise RuntimeError(
                f"conveyor: CMake found no pybind11, or no Python headers, in {build_dir} for "
                f"{sys.executable}: install pybind11-dev and python3-dev (Debian; scripts/install-deps.sh), "
                "or pybind11 from PyPI into the build environment")
        jobs = []
        if self.parallel and not isinstance(self.parallel, bool):
            jobs = ["--parallel", str(self.parallel)]
        self.spawn([cmake, "--build", str(build_dir), "--target", "conveyor_python", *jobs])

        target = Path(self.get_ext_fullpath(ext.name)).resolve()
        built = build_dir / "python" / "conveyor" / target.name
        if not built.is_file():
            found = sorted(p.name for p in (build_dir / "python" / "conveyor").glob("_conveyor*"))
            raise RuntimeError(
                f"conveyor: {built} was not built; found {found or 'no module'}: built for another "
                f"interpreter? Configure {build_dir} with -DPython3_EXECUTABLE={sys.executable}")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built, target)

    def configure(self, cmake, build_dir):
        extra = shlex.split(os.environ.get("CMAKE_ARGS", ""))
        args = [
            cmake, "-S", str(ROOT), "-B", str(build_dir),
            "-DCMAKE_BUILD_TYPE=Release",
            # No link-time optimisation (pybind11 asks for it in Release builds): the module is
            # one translation unit, so LTO gains little, and its link recompiles the whole
            # module every time, where ccache makes a rebuild of unchanged sources instant.
            "-DCMAKE_INTERPROCEDURAL_OPTIMIZATION=OFF",
            f"-DPython3_EXECUTABLE={sys.executable}",
            # The module only: no tests, examples, benchmarks or install rules.
            "-DCONVEYOR_BUILD_TESTS=OFF",
            "-DCONVEYOR_BUILD_EXAMPLES=OFF",
            "-DCONVEYOR_BUILD_BENCH=OFF",
            "-DCONVEYOR_INSTALL=OFF",
            "-DCONVEYOR_BUILD_PYTHON=ON",
        ]
        try:  # pybind11 from PyPI (an isolated build) or Debian's python3-pybind11
            import pybind11

            args.append(f"-Dpybind11_DIR={pybind11.get_cmake_dir()}")
        except ImportError:
            pass  # CMake's own search: Debian's pybind11-dev is in /usr/lib/cmake/pybind11
        if shutil.which("ccache") and not any("CMAKE_CXX_COMPILER_LAUNCHER" in a for a in extra):
            args.append("-DCMAKE_CXX_COMPILER_LAUNCHER=ccache")
        # A folder keeps the generator it was configured with.
        if not os.environ.get("CMAKE_GENERATOR") and not (build_dir / "CMakeCache.txt").exists():
            if shutil.which("ninja") or shutil.which("ninja-build"):
                args += ["-G", "Ninja"]
        self.spawn(args + extra)


def build_base():
    given = given_build_dir()
    return (given / "pip") if given is not None else (ROOT / "build" / "pip")


def check_wheel_command():
    """A wheel (what pip installs, even from a source tree) needs setuptools' bdist_wheel: its
    own from setuptools 70.1, the `wheel` package's before. An isolated build installs wheel
    (pyproject.toml); with --no-build-isolation it must be in the environment already, and
    setuptools alone would only say "invalid command 'bdist_wheel'"."""
    if not {"bdist_wheel", "dist_info"} & set(sys.argv[1:]):
        return
    if importlib.util.find_spec("setuptools.command.bdist_wheel") is None and importlib.util.find_spec("wheel") is None:
        sys.exit(
            f"conveyor: building a wheel with setuptools {setuptools.__version__} needs the wheel package, which "
            f"{sys.prefix} lacks (a build with --no-build-isolation uses the environment's): install it there, "
            "without an index from Debian's copy: pip install --no-index --find-links /usr/share/python-wheels wheel "
            "(Debian python3-wheel-whl), or make the venv with --system-site-packages (Debian python3-wheel)")


check_wheel_command()

# setuptools' staging folders and the egg-info go to build_base(), not beside the sources.
_base = build_base()
_base.mkdir(parents=True, exist_ok=True)

setup(
    version=conveyor_version(),
    packages=["conveyor"],
    package_dir={"": "python"},
    package_data={"conveyor": ["_conveyor.pyi", "py.typed"]},
    ext_modules=[Extension("conveyor._conveyor", sources=[])],
    cmdclass={"build_ext": cmake_build_ext},
    options={"build": {"build_base": str(_base)}, "egg_info": {"egg_base": str(_base)}},
    zip_safe=False,
)
