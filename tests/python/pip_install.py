"""ctest python-pip-install: conveyor installs as Python users install it (pyproject.toml),
with no package index, from Debian's packages.

1. A virtual environment with the system's packages (Debian's setuptools, wheel, build,
   pybind11): `pip install --no-build-isolation --no-index <source>`.
2. `python -m build --wheel --no-isolation` of the same source; the wheel installed with
   `--no-index` into a plain virtual environment (no system packages).
3. That plain venv builds from the source too: without the wheel package it fails saying what
   it lacks; with Debian's copy of it (/usr/share/python-wheels) it installs.
After each install, from a folder outside the source and build trees: `import conveyor` finds
the venv's copy, `__version__` and the distribution's version are the headers', and a
pipeline of four JPEGs runs (files, decode, batch); the module, `__init__.py`, the stubs and
`py.typed` are installed. After each `pip uninstall -y conveyor`, site-packages holds exactly
the files it held before the install.

Steps 1-3 package the module of this build (CONVEYOR_BUILD_DIR: setup.py brings the
conveyor_python target up to date, a no-op after the build, and packages it), so nothing is
compiled twice. With CONVEYOR_TEST_PIP_FROM_SCRATCH=1, also:
4. an sdist (`python -m build --sdist`), unpacked, and its wheel built with no build folder
   given: setup.py configures and compiles the module itself (a Release build of one
   translation unit: minutes), proving the sdist holds what the build needs; installed in the
   plain venv and checked as above.

Exits 77 (skipped, with the reason) where the interpreter cannot make virtual environments
(Debian python3-venv) or lacks setuptools, wheel, build, pybind11 or PIL (python3-setuptools,
python3-wheel, python3-build, python3-pybind11, python3-pil).

Usage: pip_install.py --source DIR --build-dir DIR --version X.Y.Z --work DIR
"""

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time

SKIP = 77
FROM_SCRATCH = "CONVEYOR_TEST_PIP_FROM_SCRATCH"
DEBIAN_WHEELS = "/usr/share/python-wheels"  # Debian's python3-*-whl packages

# Run by each venv's interpreter, in a folder of its own: what `import conveyor` finds, its
# version and the distribution's, a pipeline's batches, the files pip installed; as JSON.
CHECK = r"""
import importlib.metadata, json, sys
import conveyor
root, = sys.argv[1:]
pipe = conveyor.files(root, shuffle=False, threads=1, rank=0, world_size=1).decode(16, crop="center").batch(2).dlpack()
batches = [[len(b), list(b.images.shape), list(b.keys)] for b in pipe]
print(json.dumps({"file": conveyor.__file__, "version": conveyor.__version__,
                  "distribution": importlib.metadata.version("conveyor"), "batches": batches,
                  "prefix": sys.prefix, "installed": [str(f.locate()) for f in importlib.metadata.files("conveyor")]}))
"""

# After the uninstall: is a distribution still known, and what would `import conveyor` find.
GONE = r"""
import importlib.metadata, json, sys
try:
    importlib.metadata.distribution("conveyor")
    dist = True
except importlib.metadata.PackageNotFoundError:
    dist = False
try:
    import conveyor
    found = conveyor.__file__
except ImportError:
    found = None
print(json.dumps({"dist": dist, "found": found, "prefix": sys.prefix}))
"""

SITE = "import json, sysconfig; print(json.dumps(sorted({sysconfig.get_path('purelib'), sysconfig.get_path('platlib')})))"


def skip(why):
    print(f"SKIP: {why}")
    sys.exit(SKIP)


# How long one step may take: a venv, an install, a packaging of the built module (seconds on
# a quiet machine); the compile from scratch (minutes). ctest's TIMEOUT covers both.
STEP_SECONDS = 300
COMPILE_SECONDS = 1500


def run(cmd, check=True, timeout=STEP_SECONDS, **kw):
    print("+", " ".join(str(c) for c in cmd), flush=True)
    t0 = time.monotonic()
    out = subprocess.run([str(c) for c in cmd], check=check, timeout=timeout, **kw)
    print(f"  ({time.monotonic() - t0:.1f} s)", flush=True)
    return out


def env(work, **extra):
    """The environment without anything that would let the source or build tree's package be
    imported instead of the installed one, or pip read or write outside the work folder."""
    dropped = ("PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "CONVEYOR_BUILD_DIR", "CMAKE_ARGS")
    e = {k: v for k, v in os.environ.items() if k not in dropped and not k.startswith("PIP_")}
    e.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", PIP_CACHE_DIR=os.path.join(work, "pip-cache"),
             TMPDIR=os.path.join(work, "tmp"), **extra)
    return e


class Venv:
    def __init__(self, work, name, system_site):
        self.work = work
        self.path = os.path.join(work, name)
        run([sys.executable, "-m", "venv", *(["--system-site-packages"] if system_site else []), self.path], env=env(work))
        self.python = os.path.join(self.path, "bin", "python")
        out = run([self.python, "-c", SITE], env=env(work), capture_output=True, text=True)
        self.site = json.loads(out.stdout)

    def files(self):
        """Every file and folder under the venv's site-packages."""
        found = set()
        for site in self.site:
            for folder, dirs, names in os.walk(site):
                found.update(os.path.join(folder, n) for n in dirs + names)
        return found

    def pip(self, *args, cwd, extra=None, **kw):
        return run([self.python, "-m", "pip", *args], cwd=cwd, env=env(self.work, **(extra or {})), **kw)


def check_installed(venv, images, away, version):
    out = run([venv.python, "-c", CHECK, images], cwd=away, env=env(venv.work), capture_output=True, text=True)
    got = json.loads(out.stdout)
    prefix = os.path.realpath(got["prefix"])
    assert os.path.realpath(got["file"]).startswith(prefix + os.sep), f"imported {got['file']}, not the copy in {prefix}"
    assert got["version"] == version, f"conveyor.__version__ is {got['version']!r}, the headers say {version!r}"
    assert got["distribution"] == version, f"the installed distribution is {got['distribution']!r}, the headers say {version!r}"
    batches = got["batches"]
    assert [b[:2] for b in batches] == [[2, [2, 16, 16, 3]]] * 2, batches
    keys = sorted(os.path.basename(k) for b in batches for k in b[2])
    assert keys == sorted(os.path.basename(p) for p in glob.glob(os.path.join(images, "*", "*.jpg"))), keys
    names = {os.path.basename(f) for f in got["installed"]}
    for wanted in ("__init__.py", "_conveyor.pyi", "py.typed"):
        assert wanted in names, f"{wanted} not installed: {sorted(names)}"
    assert any(n.startswith("_conveyor.") and n.endswith(".so") for n in names), f"no module installed: {sorted(names)}"
    print(f"  imported {got['file']} {got['version']}; batches {[b[:2] for b in batches]}; {len(names)} files installed")


def check_uninstalled(venv, before, away):
    venv.pip("uninstall", "-y", "conveyor", cwd=away)
    # Running pip may byte-compile pip's own modules; nothing else may differ.
    left = sorted(f for f in venv.files() - before if not (f.endswith(".pyc") and "conveyor" not in os.path.basename(f)))
    assert not left, f"left in site-packages after pip uninstall: {left}"
    gone = sorted(before - venv.files())
    assert not gone, f"pip install and uninstall removed files that were there before: {gone}"
    out = run([venv.python, "-c", GONE], cwd=away, env=env(venv.work), capture_output=True, text=True)
    got = json.loads(out.stdout)
    assert not got["dist"], "pip uninstall left conveyor's distribution"
    if got["found"] is not None:  # a system-wide copy (scripts/install-python.sh) may remain
        assert not os.path.realpath(got["found"]).startswith(os.path.realpath(got["prefix"]) + os.sep), got["found"]
    print("  uninstalled: site-packages as before the install")


def install_check_uninstall(venv, install_args, images, away, version, extra=None):
    before = venv.files()
    venv.pip("install", "--no-index", *install_args, cwd=away, extra=extra)
    check_installed(venv, images, away, version)
    check_uninstalled(venv, before, away)


def build(python, args, source, outdir, work, extra=None, timeout=STEP_SECONDS):
    """`python -m build` of `source` into `outdir`, without isolation; the one file it made."""
    os.makedirs(outdir, exist_ok=True)
    before = set(os.listdir(outdir))
    run([python, "-m", "build", "--no-isolation", *args, "--outdir", outdir, source], cwd=work, env=env(work, **(extra or {})),
        timeout=timeout)
    made = sorted(set(os.listdir(outdir)) - before)
    assert len(made) == 1, f"python -m build {' '.join(args)} made {made}"
    return os.path.join(outdir, made[0])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--source", required=True)
    p.add_argument("--build-dir", required=True)
    p.add_argument("--version", required=True)
    p.add_argument("--work", required=True)
    a = p.parse_args()

    if subprocess.run([sys.executable, "-c", "import venv, ensurepip"], capture_output=True).returncode != 0:
        skip(f"{sys.executable} cannot make virtual environments (Debian python3-venv)")
    for module, package in (("setuptools", "python3-setuptools"), ("wheel", "python3-wheel"), ("build", "python3-build"),
                            ("pybind11", "python3-pybind11"), ("PIL", "python3-pil")):
        if subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True).returncode != 0:
            skip(f"{sys.executable} has no {module} (Debian {package})")

    t0 = time.monotonic()
    work = os.path.abspath(a.work)
    shutil.rmtree(work, ignore_errors=True)
    away = os.path.join(work, "elsewhere")  # the checks' working folder: no package here
    images = os.path.join(work, "images")
    for folder in (away, os.path.join(work, "tmp")):
        os.makedirs(folder)
    from PIL import Image

    for c, cls in enumerate(("cat", "dog")):
        os.makedirs(os.path.join(images, cls))
        for i in range(2):
            size = (40 + 8 * i, 30 + 4 * c)
            Image.new("RGB", size, (60 * i, 120, 100 * c)).save(os.path.join(images, cls, f"{cls}{i}.jpg"), quality=90)
    reuse = {"CONVEYOR_BUILD_DIR": os.path.abspath(a.build_dir)}

    print("== 1. pip install --no-build-isolation in a venv with the system's packages")
    system = Venv(work, "venv-system", system_site=True)
    install_check_uninstall(system, ["--no-build-isolation", a.source], images, away, a.version, extra=reuse)

    print("== 2. python -m build --wheel, installed in a plain venv")
    wheel = build(system.python, ["--wheel"], a.source, os.path.join(work, "dist"), work, extra=reuse)
    assert os.path.basename(wheel).startswith(f"conveyor-{a.version}-"), wheel
    plain = Venv(work, "venv-plain", system_site=False)
    install_check_uninstall(plain, [wheel], images, away, a.version)

    print("== 3. pip install --no-build-isolation in the plain venv")
    out = plain.pip("install", "--no-index", "--no-build-isolation", a.source, cwd=away, extra=reuse, check=False,
                    capture_output=True, text=True)
    assert out.returncode != 0 and "needs the wheel package" in out.stdout + out.stderr, out.stdout + out.stderr
    print("  without the wheel package: refused, saying so")
    if glob.glob(os.path.join(DEBIAN_WHEELS, "wheel-*.whl")):
        plain.pip("install", "--no-index", "--find-links", DEBIAN_WHEELS, "wheel", cwd=away)
        install_check_uninstall(plain, ["--no-build-isolation", a.source], images, away, a.version, extra=reuse)
    else:
        print(f"  skipped: no wheel package in {DEBIAN_WHEELS} (Debian python3-wheel-whl)")

    print("== 4. an sdist, and its wheel compiled from scratch")
    if os.environ.get(FROM_SCRATCH) == "1":
        sdist = build(system.python, ["--sdist"], a.source, os.path.join(work, "dist"), work, extra=reuse)
        unpacked = os.path.join(work, "sdist")
        with tarfile.open(sdist) as tar:
            tar.extractall(unpacked)
        tree, = glob.glob(os.path.join(unpacked, "conveyor-*"))
        wheel = build(system.python, ["--wheel"], tree, os.path.join(work, "dist-scratch"), work, timeout=COMPILE_SECONDS)
        install_check_uninstall(plain, [wheel], images, away, a.version)
    else:
        print(f"  skipped (opt-in, minutes of compiling): set {FROM_SCRATCH}=1 to build the sdist's wheel from scratch")

    shutil.rmtree(work, ignore_errors=True)
    print(f"python-pip-install: passed in {time.monotonic() - t0:.1f} s")


if __name__ == "__main__":
    main()
