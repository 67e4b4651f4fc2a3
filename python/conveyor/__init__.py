"""conveyor: training input pipelines run in C++, iterated from Python.

A pipeline is described with a builder and runs only when it is iterated::

    import conveyor

    pipe = (conveyor.shards("s3://bucket/train/shard-{000000..000146}.tar", seed=7)
            .shuffle(10_000)
            .decode(size=224, crop="random_resized", flip=True)
            .batch(256)
            .to_cuda(0))
    for epoch in range(90):
        for images, labels in pipe:      # one epoch; the next loop runs the next one
            train_step(images, labels)

Reading (io_uring, S3), tar parsing, shuffling, decoding, batching and the copy to the GPU
all run on conveyor's own threads, without the GIL. Each batch arrives as ``torch.Tensor``
objects that share the batch's memory (DLPack: no copy), on the CPU or on the GPU.

Sources: :func:`files` (a folder, an index file with its classes file, a list of paths),
:func:`s3` (a prefix, an index, a list of keys) and :func:`shards` (webdataset-style tar
shards anywhere: local paths, ``s3://``, ``http(s)://``, a dataset index). Each epoch is
divided among the ranks of a distributed job (``RANK``/``WORLD_SIZE`` and the other
launchers' variables, or ``rank=``/``world_size=``), and among the workers of a
``torch.utils.data.DataLoader`` when the pipeline is iterated inside one.
"""

from __future__ import annotations

import collections as _collections
import copy as _copy
import json as _json
import math as _math
import os as _os
import sys as _sys
import weakref as _weakref
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from . import _conveyor
from ._conveyor import Error, center_crop
from ._conveyor import __version__  # the C++ headers' version (include/conveyor/version.hpp)

__all__ = [
    "Error",
    "IMAGENET_MEAN",
    "IMAGE_FIELDS",
    "IMAGENET_STD",
    "Pipeline",
    "Epoch",
    "files",
    "s3",
    "shards",
    "mix",
    "merge_states",
    "environment_split",
    "center_crop",
]

#: The fields ``decode()`` takes a sample's image from, the first present: webdataset's image
#: extensions for the formats conveyor decodes.
IMAGE_FIELDS: Tuple[str, ...] = ("jpg", "jpeg", "png", "webp", "avif")

#: ImageNet's per-channel RGB mean and standard deviation (pixels in [0, 1]), as
#: torchvision's pretrained models expect them: ``batch(dtype="float16", mean=IMAGENET_MEAN, std=IMAGENET_STD)``.
IMAGENET_MEAN: Tuple[float, float, float] = (0.485, 0.456, 0.406)
IMAGENET_STD: Tuple[float, float, float] = (0.229, 0.224, 0.225)

_STATE_FORMAT = "conveyor-python-state"

# Parts of a description that hold the user's callables: shared between pipelines, not copied.
_SHARED_KEYS = ("ops", "post", "sources", "schedule")

# What pipelines resolved before a fork left in the child (a DataLoader worker): their
# runtimes' threads exist only in the parent, so they are kept, never destroyed (that would
# join threads that are not there), and never used.
_inherited: List[Any] = []


def environment_split() -> Tuple[int, int]:
    """The (rank, world_size) the launcher set in the environment: ``RANK``/``WORLD_SIZE``
    (torchrun), ``SLURM_PROCID``/``SLURM_NTASKS``, ``OMPI_COMM_WORLD_RANK``/``OMPI_COMM_WORLD_SIZE``;
    (0, 1) when none is set. Raises :class:`Error` for a malformed or inconsistent pair."""
    return _conveyor.environment_split()


def _worker_split() -> Tuple[int, int]:
    """(worker, workers) of the torch DataLoader worker this runs in, else (0, 1)."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        return 0, 1
    info = torch.utils.data.get_worker_info()
    if info is None:
        return 0, 1
    return info.id, info.num_workers


#: The keywords spelled otherwise than the C++ fields they set, by section: every other
#: keyword of a builder, and every key of the description handed to C++, is the field's own
#: name in the option struct that plays the section's role (``_conveyor.option_fields(role)``
#: lists them; C++ refuses any other key). tests/python/test_options.py checks this table
#: and the builders' signatures against the C++ structs.
_ALIASES: Dict[str, Dict[str, str]] = {
    "order": {"uneven": "policy"},  # conveyor::order_options
    "s3": {"config": "credentials_file", "endpoint": "endpoint_url"},  # conveyor::s3::config_options
    "cache": {"cache": "dir", "cache_bytes": "max_bytes"},  # conveyor::store::cache_options
    "decode": {"first_number": "label_map.first_number", "on_error": "errors"},  # conveyor::image::decode_image_options
    "collate": {"dtype": "type"},  # conveyor::image::collate_options
    "to_cuda": {"buffers": "ring"},  # conveyor::cuda::staging_options
}


def _section(role: str, fields: Dict[str, Any], options: Dict[str, Any]) -> Dict[str, Any]:
    """A section of the description: ``fields`` with ``options`` (further fields of the
    role's C++ struct, by their names) added, checked by C++ now: an unknown key raises
    TypeError naming the valid ones, a bad value ValueError."""
    section = dict(fields)
    section.update(options)
    _conveyor.check_options(role, section)
    return section


def _order(seed, shuffle, uneven) -> Dict[str, Any]:
    if uneven not in ("drop", "pad"):
        raise ValueError(f"uneven must be 'drop' or 'pad', not {uneven!r}")
    return _section("order", {"seed": int(seed), "shuffle": bool(shuffle), "policy": uneven}, {})


def _s3_spec(config, endpoint, region, profile, anonymous) -> Dict[str, Any]:
    return _section(
        "s3",
        {
            "credentials_file": _os.fspath(config) if config is not None else "",
            "endpoint_url": endpoint or "",
            "region": region or "",
            "profile": profile or "",
            "anonymous": bool(anonymous),
        },
        {},
    )


def _cache(cache, cache_bytes) -> Optional[Dict[str, Any]]:
    if cache is None:
        return None
    return _section("cache", {"dir": _os.fspath(cache), "max_bytes": int(cache_bytes)}, {})


def _common(on_error: str, threads: int, rank, world_size) -> Dict[str, Any]:
    if on_error not in ("fail", "skip"):
        raise ValueError(f"on_error must be 'fail' or 'skip', not {on_error!r}")
    if (rank is None) != (world_size is None):
        raise ValueError("give both rank and world_size, or neither (then they come from the environment)")
    return {"on_error": on_error, "threads": int(threads), "rank": rank, "world_size": world_size}


def files(
    root: Union[str, "os.PathLike[str]", None] = None,
    *,
    paths: Optional[Sequence[str]] = None,
    index: Union[str, "os.PathLike[str]", None] = None,
    classes: Union[str, "os.PathLike[str]", None] = None,
    labels: bool = True,
    extensions: Sequence[str] = (".jpg", ".jpeg", ".png", ".webp", ".avif"),
    seed: int = 0,
    shuffle: bool = True,
    uneven: str = "drop",
    on_error: str = "fail",
    threads: int = 0,
    rank: Optional[int] = None,
    world_size: Optional[int] = None,
) -> "Pipeline":
    """Images in local files, read through io_uring.

    - ``files(root)``: a folder in ImageFolder layout (one directory per class, ids in sorted
      order; ``labels=False``: every label -1), walked once;
    - ``files(root, index="index.json", classes="classes.json")``: an index file (a JSON array
      of paths relative to ``root``) and, optionally, a classes file
      (``{"n01440764": {"id": 0, "name": "tench"}, ...}``: labels from each path's class directory);
    - ``files(paths=[...])``: these files, labels -1.

    Each epoch takes the files in an order that is a pure function of (``seed``, epoch)
    (``shuffle=False``: listing order), divided among ranks and workers; with ``uneven="drop"``
    the last ``len % slots`` files of the order are left out so that every slot reads as many,
    with ``"pad"`` the first ones are read twice. ``on_error="skip"``: an unreadable or
    undecodable image is skipped, counted (``stats()["skipped"]``) and logged once.
    ``threads``: compute threads for decoding (0: this rank's share of the usable cores, their
    count divided by the ranks on this node: ``LOCAL_WORLD_SIZE``, ``SLURM_NTASKS_PER_NODE``,
    ``OMPI_COMM_WORLD_LOCAL_SIZE``, or ``torch.cuda.device_count()`` where only ``LOCAL_RANK``
    is set; at least 1)."""
    if paths is not None and (root is not None or index is not None):
        raise ValueError("give paths=, or a root folder (with an optional index=), not both")
    if paths is None and root is None:
        raise ValueError("files() needs a root folder or paths=")
    if classes is not None and index is None:
        raise ValueError("classes= goes with index= (a folder's classes are its directories)")
    spec = {
        "kind": "files",
        "source": _section(
            "source",
            {
                "root": _os.fspath(root) if root is not None else "",
                "paths": [_os.fspath(p) for p in paths] if paths is not None else None,
                "index": _os.fspath(index) if index is not None else "",
                "classes": _os.fspath(classes) if classes is not None else "",
                "labels": bool(labels),
                "extensions": list(extensions),
            },
            {},
        ),
        "order": _order(seed, shuffle, uneven),
        **_common(on_error, threads, rank, world_size),
    }
    return Pipeline(spec)


def s3(
    url: Optional[str] = None,
    *,
    keys: Optional[Sequence[str]] = None,
    bucket: Optional[str] = None,
    index: Optional[str] = None,
    classes: Union[str, "os.PathLike[str]", None] = None,
    prefix: str = "",
    labels: bool = False,
    extensions: Sequence[str] = (".jpg", ".jpeg", ".png", ".webp", ".avif"),
    config: Union[str, "os.PathLike[str]", None] = None,
    endpoint: Optional[str] = None,
    region: Optional[str] = None,
    profile: Optional[str] = None,
    anonymous: bool = False,
    cache: Union[str, "os.PathLike[str]", None] = None,
    cache_bytes: int = 0,
    seed: int = 0,
    shuffle: bool = True,
    uneven: str = "drop",
    on_error: str = "fail",
    threads: int = 0,
    rank: Optional[int] = None,
    world_size: Optional[int] = None,
) -> "Pipeline":
    """Images stored as S3 objects, many requests in flight.

    - ``s3("s3://bucket/train/")``: every object under the prefix with one of ``extensions``
      (listed once, in parallel); ``labels=True``: ImageFolder labels from the first level of
      "directories" under the prefix (ids in sorted order, or a local ``classes`` file's);
    - ``s3(index="s3://bucket/index.json")`` or ``s3(index="index.json", bucket="bucket")``:
      an index file (a JSON array of object keys relative to the bucket) in the bucket or
      local; with ``labels=True`` or a ``classes`` file (local:
      ``{"n01440764": {"id": 0, "name": "tench"}, ...}``), each key's first "directory"
      below ``prefix`` is its class;
    - ``s3(bucket="b", keys=[...])``: these objects (labels as for an index).

    Credentials: ``config`` names the JSON credentials file
    (``{"aws_access_key_id": ..., "aws_secret_access_key": ..., "endpoint_url": ..., "bucket_name": ...}``);
    without it, the AWS SDKs' order (environment, web identity, profiles, container and
    instance credentials, refreshed before they expire). ``endpoint``, ``region`` and
    ``profile`` override the configuration's. ``cache``: a node-local folder where the objects
    are kept for later epochs and other processes (``cache_bytes`` at most, 0: no limit), as
    for :func:`shards`. Order, split and errors as for :func:`files`."""
    given = sum(x is not None for x in (url, index, keys))
    if given != 1:
        raise ValueError("s3() takes one of: a prefix URL, index=, or bucket= with keys=")
    if keys is not None and not bucket:
        raise ValueError("keys= needs bucket=")
    spec = {
        "kind": "s3",
        "source": _section(
            "source",
            {
                "url": url or "",
                "keys": list(keys) if keys is not None else None,
                "bucket": bucket or "",
                "prefix": prefix,
                "index": _os.fspath(index) if index is not None else "",
                "classes": _os.fspath(classes) if classes is not None else "",
                "labels": bool(labels),
                "extensions": list(extensions),
            },
            {},
        ),
        "s3": _s3_spec(config, endpoint, region, profile, anonymous),
        "cache": _cache(cache, cache_bytes),
        "order": _order(seed, shuffle, uneven),
        **_common(on_error, threads, rank, world_size),
    }
    return Pipeline(spec)


def shards(
    urls: Union[str, Sequence[str]],
    *,
    seed: int = 0,
    shuffle: bool = True,
    uneven: str = "drop",
    resampled: bool = False,
    shards_in_flight: int = 0,
    cache: Union[str, "os.PathLike[str]", None] = None,
    cache_bytes: int = 0,
    config: Union[str, "os.PathLike[str]", None] = None,
    endpoint: Optional[str] = None,
    region: Optional[str] = None,
    profile: Optional[str] = None,
    anonymous: bool = False,
    on_error: str = "fail",
    threads: int = 0,
    rank: Optional[int] = None,
    world_size: Optional[int] = None,
) -> "Pipeline":
    """Samples of webdataset-style tar shards (``.tar``, ``.tar.gz``), streamed.

    ``urls``: one spec or several: brace patterns (``/data/shard-{000000..000146}.tar``,
    ``s3://bucket/train/shard-{0000..0099}.tar``, ``https://...``), prefixes with a trailing
    slash (every shard under them), or a dataset index (``.json``, as ``make_shards --index``
    writes it: the shards with their sample counts, so ``len()`` is known).

    Each epoch reads this rank's share of the shards in an order that is a pure function of
    (``seed``, epoch), ``shards_in_flight`` at once (0: 4 local, 12 remote), samples
    interleaved; ``shuffle(n)`` then mixes samples across shards. ``uneven``: ``"drop"``
    leaves out the shards that do not divide among the slots, ``"pad"`` reads some twice.
    ``resampled=True``: shards drawn at random with replacement, forever (bound the loop
    yourself). ``cache``: a node-local folder where remote shards are kept for later epochs
    and other processes (``cache_bytes`` at most, 0: no limit). S3 settings as for :func:`s3`.
    ``on_error="skip"``: the rest of an unreadable shard, or an undecodable image, is skipped
    and counted. The position in the epoch is kept (:meth:`Pipeline.state_dict`)."""
    if isinstance(urls, (str, _os.PathLike)):
        urls = [_os.fspath(urls)]
    urls = [_os.fspath(u) for u in urls]
    if not urls:
        raise ValueError("shards() needs at least one URL or pattern")
    spec = {
        "kind": "shards",
        "urls": urls,
        "order": _order(seed, shuffle, uneven),
        "shard": _section("shard", {"resampled": bool(resampled), "shards_in_flight": int(shards_in_flight)}, {}),
        "cache": _cache(cache, cache_bytes),
        "s3": _s3_spec(config, endpoint, region, profile, anonymous),
        **_common(on_error, threads, rank, world_size),
    }
    return Pipeline(spec)


def mix(
    sources: Sequence["Pipeline"],
    weights: Optional[Sequence[float]] = None,
    *,
    seed: int = 0,
    stop: str = "all",
    schedule=None,
    schedule_step: int = 1000,
    on_error: str = "fail",
    threads: int = 0,
    rank: Optional[int] = None,
    world_size: Optional[int] = None,
) -> "Pipeline":
    """Samples drawn from several sources by weight: each sample comes from source ``k``
    with probability ``weights[k] / sum(weights)`` (default: all equal).

    ``sources`` are pipelines of samples (:func:`shards`, :func:`files`, :func:`s3`, with
    their own ``seed``, ``shuffle()`` and :meth:`Pipeline.map`/``filter()``, but no
    ``decode()`` or ``batch()``: those come after the mix). Each keeps its own order and
    its share of each epoch (this rank's, as the mix's); which source the ``i``-th sample
    comes from is a pure function of (``seed``, epoch, rank, ``i``), never of timing.

    ``stop``: ``"first"`` ends the epoch when the first source runs out, ``"all"`` when all
    have (an exhausted source drops out and the weights of the others are renormalised),
    ``"never"`` starts an exhausted source again with its next epoch, for ever (bound the
    loop yourself). ``schedule``: a function of the global sample index (samples drawn by
    all ranks together) returning the weights, asked every ``schedule_step`` samples (it
    must be quick: it runs with the GIL on conveyor's I/O thread), e.g. a curriculum
    ``lambda i: [1.0, min(1.0, i / 1e6)]``.

    :meth:`Pipeline.state_dict` holds every source's position and the mix's draws, and
    resumes exactly (each sample once), merged across ranks onto any number of ranks."""
    sources = list(sources)
    if not sources:
        raise ValueError("mix() needs at least one source")
    for i, p in enumerate(sources):
        if not isinstance(p, Pipeline):
            raise TypeError(f"mix() takes pipelines; source {i} is {type(p).__name__}")
        sp = p._spec
        if sp["kind"] == "mix":
            raise ValueError(f"source {i} is itself a mix: give its sources to one mix() with their weights")
        if sp["decode"] is not None or sp["collate"] is not None or sp["tuple"] is not None or sp["post"]:
            raise ValueError(f"source {i} decodes or batches: decode(), batch() and to_tuple() come after mix()")
    if stop not in ("first", "all", "never"):
        raise ValueError(f"stop must be 'first', 'all' or 'never', not {stop!r}")
    if weights is None:
        weights = [1.0] * len(sources)
    weights = [float(w) for w in weights]
    if len(weights) != len(sources):
        raise ValueError(f"mix() has {len(sources)} sources and {len(weights)} weights")
    if any(not _math.isfinite(w) or w < 0 for w in weights) or not any(w > 0 for w in weights):
        raise ValueError(f"mix() weights must be finite, 0 or more, and not all 0: {weights}")
    if schedule is not None and not callable(schedule):
        raise TypeError("schedule= takes a function of the global sample index")
    if int(schedule_step) < 1:
        raise ValueError("schedule_step must be at least 1")
    spec = {
        "kind": "mix",
        "sources": [p._spec for p in sources],
        "mix": {"weights": weights, "seed": int(seed), "stop": stop, "schedule_step": int(schedule_step)},
        "schedule": schedule,
        "order": _order(seed, True, "drop"),
        **_common(on_error, threads, rank, world_size),
    }
    return Pipeline(spec)


def merge_states(states: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """The union of the states of all ranks of one epoch (each rank's
    :meth:`Pipeline.state_dict`, gathered e.g. with ``torch.distributed.all_gather_object``):
    loaded with any number of ranks, the rest of the epoch is divided among them, each
    item once. Raises :class:`Error` when the states belong to different epochs, seeds or
    lists."""
    states = list(states)
    if not states:
        raise ValueError("merge_states needs at least one state")
    states = [_upgraded(s) for s in states]
    epochs = {s["epoch"] for s in states}
    if len(epochs) != 1:
        raise Error(f"merge_states: the states belong to different epochs ({sorted(epochs)})")
    begun = [s["progress"] for s in states if s["progress"]]
    merge = _conveyor.merge_mix_progress if states[0].get("kind") == "mix" else _conveyor.merge_progress
    merged = merge(begun) if begun else ""  # "": no rank had used anything yet
    out = dict(states[0])
    out["progress"] = merged
    out["rank"] = None
    out["world_size"] = None
    return out


def _upgraded(s: Dict[str, Any]) -> Dict[str, Any]:
    """State ``s`` checked, in this version's form (version 1's shard states carry their
    progress under ``"shards"``)."""
    if not isinstance(s, dict) or s.get("format") != _STATE_FORMAT:
        raise ValueError("not a conveyor state (Pipeline.state_dict() makes one)")
    if s.get("version") == 1 and s.get("shards") is not None:
        s = {k: v for k, v in s.items() if k not in ("shards", "position", "done")}
        s["progress"], s["version"] = s.get("shards") or "", 2
        return s
    if s.get("version") == 1:
        raise ValueError("a files or S3 state of conveyor's state version 1 cannot be restored: its positions are per rank")
    if s.get("version") != 2:
        raise ValueError(f"conveyor state version {s.get('version')!r} is not supported (2 is)")
    return s


class Pipeline:
    """A pipeline: a source and the stages after it. Builder methods return a new pipeline
    and leave this one as it was; nothing runs until it is iterated.

    Iterating runs one epoch: ``for images, labels in pipe`` (with ``keys()``:
    ``images, labels, keys``). A loop that ends normally moves the pipeline on to the next
    epoch; a loop broken off leaves it in the same epoch, and iterating again goes on from
    where the consumer stopped. :meth:`set_epoch` chooses the epoch, :meth:`state_dict` and
    :meth:`load_state_dict` save and restore the position for a checkpoint."""

    def __init__(self, spec: Dict[str, Any]):
        self._spec = spec
        self._spec.setdefault("shuffle", None)
        self._spec.setdefault("decode", None)
        self._spec.setdefault("label_map_file", "")
        self._spec.setdefault("collate", None)
        self._spec.setdefault("to_cuda", None)
        self._spec.setdefault("with_keys", False)
        self._spec.setdefault("views", False)  # members as memoryviews, not bytes
        self._spec.setdefault("output", "torch")
        self._spec.setdefault("ops", [])  # Python stages on samples, run by C++ on their own threads
        self._spec.setdefault("shuffle_at", 0)  # the shuffle comes before ops[shuffle_at]
        self._spec.setdefault("post", [])  # Python stages on what the pipeline yields (batches, tuples)
        self._spec.setdefault("tuple", None)  # to_tuple's fields
        self._dataset = None  # the resolved source (listing, shard list, clients): made once
        self._runtime = None
        self._epoch = 0
        self._state: Optional[str] = None  # progress JSON of the current epoch
        self._last_stats: Dict[str, Any] = {}
        self._active: Optional["_weakref.ref[Epoch]"] = None  # weak: dropping the iterator stops its run
        self._pid: Optional[int] = None  # the process that resolved the source

    # ---- building -------------------------------------------------------------------

    def _with(self, **changes) -> "Pipeline":
        # The description is copied, the user's callables shared (a tokenizer's bound method
        # is not copied with its tokenizer); a change makes new lists, never edits old ones.
        spec = {k: (v if k in _SHARED_KEYS else _copy.deepcopy(v)) for k, v in self._spec.items()}
        spec.update(changes)
        return Pipeline(spec)

    def shuffle(self, buffer: int, *, seed: Optional[int] = None, **options: Any) -> "Pipeline":
        """Mixes items through a buffer of ``buffer`` items (webdataset's ``shuffle(n)``):
        each item out is drawn at random from the buffer. The draws are a pure function of
        (``seed``, epoch); ``seed`` defaults to the source's. ``options``: further fields of
        ``conveyor::shuffle_options`` by name (``initial``)."""
        if buffer < 1:
            raise ValueError("shuffle buffer must be at least 1")
        seed = int(seed if seed is not None else self._spec["order"]["seed"])
        if self._spec["post"] or self._spec["decode"] is not None or self._spec["collate"] is not None:
            raise ValueError("shuffle() mixes samples: it comes before decode() and batch()")
        return self._with(
            shuffle=_section("shuffle", {"buffer": int(buffer), "seed": seed}, options), shuffle_at=len(self._spec["ops"])
        )

    def map(self, fn, *, threads: int = 4, ordered: bool = True) -> "Pipeline":
        """Calls ``fn`` on every item, on a pool of ``threads`` Python threads, and hands on
        what it returns.

        Before :meth:`decode`, :meth:`batch` and :meth:`to_tuple`, items are samples (dicts
        as webdataset yields them: ``__key__``, ``__url__``, one entry per field, bytes) and
        ``fn`` returns a sample: a dict (bytes-like values stay fields that :meth:`decode`
        can decode, a value handed back untouched is not copied, any other value is carried
        as it is) or None to drop the sample (as webdataset's ``map``). Later, ``fn`` gets
        what the pipeline yields there (a batch, a tuple) and returns its replacement.

        The reading, parsing and decoding before and after run on conveyor's threads without
        the GIL; only the calls take it, so a function that releases it (PIL, NumPy, a
        tokenizer in Rust) runs on ``threads`` cores at once. ``ordered=False`` hands items
        on as they are done. An exception names the stage, the sample's key and its shard,
        and follows the source's ``on_error``: it fails the epoch, or the item is skipped and
        counted."""
        return self._with_op("map", fn, threads, ordered)

    def filter(self, pred, *, threads: int = 4, ordered: bool = True) -> "Pipeline":
        """Keeps the items for which ``pred(item)`` is true (samples before :meth:`decode`,
        :meth:`batch` and :meth:`to_tuple`; else what the pipeline yields there), called as
        :meth:`map` calls its function. A dropped sample counts as read for
        :meth:`state_dict`."""
        return self._with_op("filter", pred, threads, ordered)

    def _with_op(self, what: str, fn, threads: int, ordered: bool) -> "Pipeline":
        if not callable(fn):
            raise TypeError(f"{what}() takes a callable, not {type(fn).__name__}")
        if int(threads) < 1:
            raise ValueError(f"{what}() needs threads >= 1")
        op = {"op": what, "fn": fn, "threads": int(threads), "ordered": bool(ordered)}
        late = self._spec["decode"] is not None or self._spec["collate"] is not None or self._spec["tuple"] is not None
        if late or self._spec["post"]:
            return self._with(post=self._spec["post"] + [op])
        return self._with(ops=self._spec["ops"] + [op])

    def to_tuple(self, *fields: str) -> "Pipeline":
        """Yields tuples of these fields instead of dicts (webdataset's ``to_tuple``): each
        name a field (``"jpg"``, ``"seg.png"``, ``"__key__"``), or alternatives
        separated by ``;`` of which the first present is taken (``"jpg;png;webp"``). A
        sample without any of them is an error naming its key and the fields it has (with
        ``on_error="skip"``: skipped and counted). After :meth:`decode` and :meth:`batch`,
        the image field (any of ``decode(fields=...)``) is the batch's image tensor and the
        label field the labels."""
        if not fields:
            raise ValueError("to_tuple() needs at least one field")
        for f in fields:
            if not isinstance(f, str) or not f or any(not a for a in f.split(";")):
                raise ValueError(f"to_tuple() fields are names, or names separated by ';': not {f!r}")
        if self._spec["post"]:
            raise ValueError("to_tuple() comes before map() and filter() on what the pipeline yields")
        return self._with(tuple=list(fields))

    def decode(
        self,
        size: Union[int, Tuple[int, int], None] = 224,
        *,
        crop: Optional[str] = None,
        flip: Union[bool, float] = False,
        scale: Tuple[float, float] = (0.08, 1.0),
        ratio: Tuple[float, float] = (3 / 4, 4 / 3),
        center_fraction: float = 0.875,
        dct_scaling: bool = True,
        seed: Optional[int] = None,
        fields: Sequence[str] = IMAGE_FIELDS,
        label_field: str = "cls",
        label_map: Union[str, "os.PathLike[str]", None] = None,
        first_number: Optional[int] = None,
        decoders: Optional[Dict[str, Any]] = None,
        **options: Any,
    ) -> "Pipeline":
        """Decodes each sample's image (JPEG, PNG, WebP, AVIF) on the compute threads, cropped
        and resized to ``size`` (an int: square; or (height, width); None: as it is), RGB,
        and its other fields as webdataset's default decoders do.

        With :meth:`batch` (and ``size`` given), each image is decoded straight into its
        place in the batch tensor; the batch yields ``(images, labels)``, or the fields
        :meth:`to_tuple` names (a caption, a JSON record, an array beside the image, each
        decoded as below and collated). Without :meth:`batch`, each sample is a dict of its
        decoded fields.

        Fields are decoded by the last extension of their name: ``jpg jpeg png webp avif``
        to uint8 tensors (height, width, 3); ``cls cls2 index`` to int; ``txt text`` to str;
        ``json`` to Python objects; ``npy`` to NumPy arrays (any dtype and shape); anything
        else stays bytes. ``decoders``: your own, by field name or extension
        (``{"seg.png": fn, "msgpack": fn}``), each called with the field's bytes on the
        Python threads (see :meth:`map`) before conveyor decodes the rest; a decoder that
        returns None leaves the field to the next in line.

        ``crop``: ``"random_resized"`` (the default with a ``size``: torchvision's RandomResizedCrop with ``scale`` and
        ``ratio``), ``"center"`` (the central ``center_fraction`` of the shorter side, as
        ``Resize(256) + CenterCrop(224)`` keeps) or ``"none"`` (the whole image resized; the default without a ``size``).
        ``flip``: True (0.5) or a probability of a horizontal flip. ``dct_scaling``: let
        libjpeg decode at 1/2, 1/4 or 1/8 scale where the output is that much smaller
        (faster, nearly the same pixels). Crops and flips are a pure function of (``seed``,
        epoch, key). Shards: the image is the first of ``fields`` the sample has, the label
        the integer in ``label_field``. ``label_map``: a validation map file gives the labels
        instead: by key (``{"ILSVRC2012_val_00000001": 65, ...}``) or by position
        (``{"0": 490, "1": 361, ...}``: a file's position in the listing, a shard sample's key
        number); ``first_number``: the key number of entry "0" when shard samples are found
        by number (1 for ImageNet's ILSVRC2012_val_00000001). ``options``: further fields of
        ``conveyor::image::decode_options`` (``strict``, ``max_pixels``, ``jpeg_crop``,
        ``format``) or of ``decode_image_options`` (``concurrency``, ``label_json``) by name."""
        if self._spec["collate"] is not None or self._spec["tuple"] is not None or self._spec["post"]:
            raise ValueError("decode() comes before batch(), to_tuple() and map() on what the pipeline yields")
        if crop is None:
            crop = "none" if size is None else "random_resized"
        if size is None:
            size = (0, 0)
        elif isinstance(size, int):
            size = (size, size)
        if crop not in ("random_resized", "center", "none"):
            raise ValueError(f"crop must be 'random_resized', 'center' or 'none', not {crop!r}")
        flip_p = 0.5 if flip is True else float(flip)
        if not 0.0 <= flip_p <= 1.0:
            raise ValueError("flip must be a bool or a probability in [0, 1]")
        pixels = set(_conveyor.option_fields("decode_options"))
        how = {
            "size": {"width": int(size[1]), "height": int(size[0])},
            "crop": crop,
            "flip": flip_p,
            "scale": [float(scale[0]), float(scale[1])],
            "ratio": [float(ratio[0]), float(ratio[1])],
            "center_fraction": float(center_fraction),
            "dct_scaling": bool(dct_scaling),
            "seed": int(seed if seed is not None else self._spec["order"]["seed"]),
        }
        how.update({k: v for k, v in options.items() if k in pixels})
        section = _section(
            "decode",
            {
                "decode": how,
                "fields": list(fields),
                "label_field": label_field,
                "label_map": {"first_number": first_number},
                "errors": self._spec["on_error"],
            },
            {k: v for k, v in options.items() if k not in pixels},
        )
        ops = self._spec["ops"]
        if decoders:
            ops = ops + [{"op": "map", "fn": _FieldDecoders(decoders), "threads": 4, "ordered": True}]
        return self._with(decode=section, ops=ops, label_map_file=_os.fspath(label_map) if label_map is not None else "")

    def batch(
        self,
        size: int,
        *,
        dtype: str = "uint8",
        layout: str = "nhwc",
        mean: Optional[Sequence[float]] = None,
        std: Optional[Sequence[float]] = None,
        partial: bool = True,
        **options: Any,
    ) -> "Pipeline":
        """Groups ``size`` items into a batch. After :meth:`decode`: the images collated into
        one tensor, each decoded straight into its place: ``uint8`` pixels as decoded, or
        ``float32``/``float16`` normalized as torchvision's ``ToTensor()`` +
        ``Normalize(mean, std)`` (defaults: 0 and 1); ``layout`` ``"nhwc"`` or ``"nchw"``.
        Without :meth:`decode`: batches of samples, a dict with a list per field (None where
        a sample lacks it); numbers a map put in become a tensor, same-shape arrays are
        stacked. ``partial=False`` drops a last, smaller batch. ``options``: further fields of
        ``conveyor::image::collate_options`` by name (``capacity``, ``slabs``)."""
        if self._spec["collate"] is not None:
            raise ValueError("batch() is given once")
        if self._spec["post"]:
            raise ValueError("batch() comes before map() and filter() on what the pipeline yields")
        if size < 1:
            raise ValueError("batch size must be at least 1")
        if dtype not in ("uint8", "float32", "float16"):
            raise ValueError(f"dtype must be 'uint8', 'float32' or 'float16', not {dtype!r}")
        if layout not in ("nhwc", "nchw"):
            raise ValueError(f"layout must be 'nhwc' or 'nchw', not {layout!r}")
        if self._spec["decode"] is None and (dtype != "uint8" or layout != "nhwc" or mean is not None or std is not None):
            raise ValueError("dtype, layout, mean and std shape decoded images: batch() after decode()")

        def three(v, fill):
            if v is None:
                return [fill] * 3
            v = [float(x) for x in v]
            if len(v) == 1:
                return v * 3
            if len(v) != 3:
                raise ValueError("mean and std take 1 or 3 values")
            return v

        return self._with(
            collate=_section(
                "collate",
                {
                    "size": int(size),
                    "type": dtype,
                    "layout": layout,
                    "mean": three(mean, 0.0),
                    "std": three(std, 1.0),
                    "partial": bool(partial),
                },
                options,
            )
        )

    def to_cuda(self, device: int = 0, *, buffers: int = 3, **options: Any) -> "Pipeline":
        """Copies each batch to GPU ``device`` from page-locked memory, overlapped with the
        decoding of the next ones; the tensors are CUDA tensors, ready when they arrive.
        Needs a build with CUDA. The device memory is a ring of ``buffers`` batches: those
        being copied and those the loop still holds (tensors taken from them included).
        A loop that keeps more than ``buffers - 1`` batches' tensors alive makes the run wait
        for one to be dropped: keep fewer, ``.clone()`` what you keep, or raise ``buffers``.
        (CPU batches have no such limit: a batch handed to the loop is its own memory.)
        ``options``: further fields of ``conveyor::cuda::staging_options`` by name (``capacity``)."""
        if self._spec["collate"] is None or self._spec["decode"] is None:
            raise ValueError("to_cuda() comes after decode() and batch()")
        if buffers < 2:
            raise ValueError("to_cuda needs at least 2 buffers (one being copied, one held)")
        # Checked when the pipeline is resolved: a build without CUDA has no staging_options.
        return self._with(to_cuda={"device": int(device), "ring": int(buffers), **options})

    def keys(self, on: bool = True) -> "Pipeline":
        """Also yield each batch's keys (sample keys, or file and object keys):
        ``for images, labels, keys in pipe``."""
        return self._with(with_keys=bool(on))

    def memoryviews(self, on: bool = True) -> "Pipeline":
        """Hand each member's bytes over as a read-only ``memoryview`` over conveyor's read
        buffer instead of a ``bytes`` copy: in raw samples, in batches of samples, and to
        ``map``/``filter`` functions. No copy is made, which is most of what a raw sample
        costs to reach Python (a 100 KB JPEG takes longer to copy than the rest of the dict
        to build). A view keeps the whole read buffer it points into alive (one shard chunk
        holds many samples): ``bytes(v)`` copies what you mean to keep. ``io.BytesIO(v)``,
        ``PIL.Image.open``, ``numpy.frombuffer`` and ``torch.frombuffer`` take views as they
        are; ``json.loads`` and ``str`` need ``bytes(v)`` or ``v.tobytes()`` first. Decoded
        fields (``decode()``) are not affected."""
        return self._with(views=bool(on))

    def dlpack(self) -> "Pipeline":
        """Yield conveyor's own batch objects instead of torch tensors: ``batch.images`` and
        ``batch.labels`` implement the DLPack protocol (``__dlpack__``), for JAX, CuPy or
        NumPy, and ``batch.keys`` lists the keys."""
        return self._with(output="dlpack")

    # ---- running --------------------------------------------------------------------

    def __getstate__(self) -> Dict[str, Any]:
        # Pickled (a DataLoader's workers started with "spawn" or "forkserver"): the
        # description and the position travel; the copy resolves the source itself.
        state = self.__dict__.copy()
        state.update(_dataset=None, _runtime=None, _active=None, _pid=None)
        return state

    def _forget_if_forked(self) -> None:
        # Forked since the source was resolved (a DataLoader worker): what the parent made
        # is left alone, and this process resolves afresh, with its own runtime and split.
        if self._pid is not None and self._pid != _os.getpid():
            active = self._active() if self._active is not None else None
            _inherited.append((self._dataset, self._runtime, active))
            self._dataset = self._runtime = self._active = self._pid = None

    def _resolved(self):
        self._forget_if_forked()
        if self._dataset is None:
            threads = self._spec["threads"]
            # threads=0 is this rank's share of the node's cores; where a launcher set LOCAL_RANK
            # and no LOCAL_WORLD_SIZE, C++ counts the node's ranks by its GPUs, which only torch knows.
            import sys

            devices, torch = 0, sys.modules.get("torch")
            if threads == 0 and torch is not None and "LOCAL_RANK" in _os.environ and "LOCAL_WORLD_SIZE" not in _os.environ:
                devices = torch.cuda.device_count()
            self._runtime = _conveyor.Runtime(threads=threads, local_devices=devices)
            rank, world = self._spec["rank"], self._spec["world_size"]
            if rank is None:
                rank, world = environment_split()
            worker, workers = _worker_split()
            self._dataset = _conveyor.Dataset(self._runtime, _run_spec(self._spec), rank, world, worker, workers)
            self._pid = _os.getpid()
        return self._dataset

    @property
    def epoch(self) -> int:
        """The epoch the next iteration runs."""
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Runs epoch ``epoch`` next, from its start. The order of shards or files, the
        shuffle and the augmentation are pure functions of (seed, epoch): every rank, and
        every run of the same epoch, agree."""
        self._stop_active()
        self._epoch = int(epoch)
        self._state = None

    @property
    def split(self) -> Tuple[int, int, int, int]:
        """(rank, world_size, worker, workers): which share of each epoch this reads."""
        return tuple(self._resolved().split)  # type: ignore[return-value]

    def shard_list(self) -> List[Dict[str, Any]]:
        """A shard pipeline's shards, resolved (patterns expanded, prefixes listed, an index
        read): each ``{"url": ..., "size": bytes, "samples": n}``, -1 where unknown."""
        if self._spec["kind"] != "shards":
            raise TypeError("shard_list() is for shard pipelines")
        return self._resolved().shards

    def __len__(self) -> int:
        """Batches this rank gets in the current epoch, when the number of items is known:
        files and S3 objects always, shards when listed by a dataset index. Raises
        TypeError otherwise."""
        items = self._resolved().items(self._epoch)
        if items is None:
            raise TypeError("len() of this pipeline is unknown: its shards were not listed by a dataset index (.json)")
        if self._spec["collate"] is None:
            return items
        n = self._spec["collate"]["size"]
        return _math.ceil(items / n) if self._spec["collate"]["partial"] else items // n

    def __iter__(self) -> "Epoch":
        self._stop_active()
        ds = self._resolved()
        run = ds.run(self._epoch, self._state)
        epoch = Epoch(self, run)
        self._active = _weakref.ref(epoch)
        return epoch

    def _current(self) -> Optional["Epoch"]:
        self._forget_if_forked()
        return self._active() if self._active is not None else None

    def _stop_active(self) -> None:
        current = self._current()
        if current is not None:
            current.close()
        self._active = None

    def stats(self) -> Dict[str, Any]:
        """The current (or last) run's statistics: per stage (in pipeline order) its items,
        bytes, busy / starved / blocked seconds and busy share, its queue; the consumer's
        wait; images skipped; the bottleneck stage."""
        current = self._current()
        if current is not None and current._run is not None:
            return current._run.stats()
        return dict(self._last_stats)

    def state_dict(self) -> Dict[str, Any]:
        """The position in the epoch, for a checkpoint: every batch handed to the loop so
        far counts as used. Restore it with :meth:`load_state_dict`; the states of all ranks
        merged (:func:`merge_states`) restore on any number of ranks."""
        current = self._current()
        if current is not None:
            current._save()
        ds = self._resolved()
        rank, world, worker, workers = ds.split
        return {
            "format": _STATE_FORMAT,
            "version": 2,
            "kind": self._spec["kind"],
            "epoch": self._epoch,
            "progress": self._state or "",
            "rank": rank,
            "world_size": world,
            "worker": worker,
            "workers": workers,
        }

    def load_state_dict(self, state: Union[Dict[str, Any], Sequence[Dict[str, Any]]]) -> None:
        """Restores a position saved by :meth:`state_dict`; a list of states (all ranks') is
        merged first (:func:`merge_states`). The rest of the epoch is read, each item not
        yet used once, divided among this run's ranks and workers (their number may
        differ from the run that saved it)."""
        state = merge_states(state) if not isinstance(state, dict) else _upgraded(state)
        kind = state.get("kind", "shards")
        if kind != self._spec["kind"]:
            raise ValueError(f"this state comes from a {kind} pipeline, not a {self._spec['kind']} pipeline")
        if state["progress"]:
            (_conveyor.check_mix_progress if kind == "mix" else _conveyor.check_progress)(state["progress"])
        self._stop_active()
        self._epoch = int(state["epoch"])
        self._state = state["progress"] or None


def _tuple_roles(spec: Dict[str, Any]) -> Optional[List[Any]]:
    """What each of to_tuple's fields is in a batch of decoded images: "images", "labels",
    "keys", or ("column", name) for a field decoded beside the image; None when the batch is
    not one of decoded images (no size, or no image among the fields asked)."""
    decode = spec["decode"]
    if decode is None or spec["collate"] is None or decode["decode"]["size"]["width"] == 0:
        return None
    if spec["tuple"] is None:
        return ["images", "labels"]
    image_fields = set(decode["fields"])
    label = decode["label_field"]
    roles: List[Any] = []
    for f in spec["tuple"]:
        alts = f.split(";")
        if any(a in image_fields for a in alts):
            roles.append("images")
        elif label and alts == [label]:
            roles.append("labels")
        elif alts == ["__key__"]:
            roles.append("keys")
        else:
            roles.append(("column", f))
    return roles if "images" in roles else None


def _run_spec(spec: Dict[str, Any]) -> Dict[str, Any]:
    """The description C++ runs: with which batches a decode() and batch() make (decoded
    images in one tensor, with the other fields to_tuple names beside them, or columns of
    any fields), and those fields."""
    spec = dict(spec)
    roles = _tuple_roles(spec)
    spec["image_batches"] = roles is not None
    if roles is not None and spec["tuple"] is not None:
        decode = dict(spec["decode"])
        decode["extra_fields"] = [r[1] for r in roles if isinstance(r, tuple)]
        spec["decode"] = decode
    elif spec["decode"] is not None and spec["collate"] is not None and spec["tuple"] is None and roles is None:
        raise ValueError("batch() of decoded images of no fixed size (decode(size=None)) needs to_tuple() to name its fields")
    return spec


class _FieldDecoders:
    """decode(decoders=...): the user's decoders by field name or last extension, each called
    with the field's bytes; None leaves the field to the next decoder in line."""

    def __init__(self, decoders: Dict[str, Any]):
        for k, fn in decoders.items():
            if not isinstance(k, str) or not k or not callable(fn):
                raise TypeError("decoders= maps field names or extensions (str) to callables")
        self._decoders = dict(decoders)
        self.__name__ = "decoders"

    def __call__(self, sample: Dict[str, Any]) -> Dict[str, Any]:
        out = None
        for name, value in sample.items():
            if name.startswith("__") or not isinstance(value, (bytes, bytearray, memoryview)):
                continue
            fn = self._decoders.get(name) or self._decoders.get(name.rsplit(".", 1)[-1].lower())
            if fn is None:
                continue
            try:
                decoded = fn(value)
            except Exception as e:
                raise type(e)(f"decoder {getattr(fn, '__name__', fn)!r} of field {name!r}: {e}") from e
            if decoded is not None:
                if out is None:
                    out = dict(sample)
                out[name] = decoded
        return out if out is not None else sample


class Epoch:
    """The iterator of one epoch of a :class:`Pipeline` (what ``iter(pipe)`` returns).
    Dropping it, or :meth:`close`, stops the run: every thread's work on it ends and its
    memory and descriptors are given back. Ctrl-C while it waits stops it too."""

    def __init__(self, pipe: Pipeline, run):
        self._pipe = pipe
        self._run = run
        self._pid = _os.getpid()
        self._torch = None
        spec = pipe._spec
        if spec["output"] == "torch" and spec["decode"] is not None:
            try:
                import torch
            except ImportError as e:  # pragma: no cover - depends on the installation
                raise ImportError("conveyor yields torch tensors: install PyTorch, or use .dlpack() for DLPack objects") from e
            self._torch = torch
        elif spec["output"] == "torch":
            import sys

            self._torch = sys.modules.get("torch")  # raw samples need no torch; numbers collate into its tensors if loaded
        self._keys = spec["with_keys"]
        self._images = spec["decode"] is not None and spec["collate"] is not None
        self._batches = spec["collate"] is not None
        self._shape = _Shape(spec, self._images)
        self._chunk: "collections.deque" = _collections.deque()
        self._pulled = 0  # items taken from the run (a chunk's samples one each)
        self._skipped = 0  # items skipped here (a to_tuple field missing, a Python stage's error)
        self._post = _PostStages(spec["post"], spec["on_error"], self) if spec["post"] else None
        self._raw = not spec["post"] and spec["decode"] is None and spec["collate"] is None and spec["tuple"] is None

    def __iter__(self) -> "Epoch":
        return self

    def _pull(self):
        """The next item of the run, shaped (a tuple, a collated batch); raises StopIteration
        at the end."""
        while True:
            if not self._chunk:
                if self._run is None:
                    raise StopIteration
                self._run.used(self._used())
                try:
                    got = self._run.next()
                except StopIteration:
                    self._finish(ended=True)
                    raise
                except BaseException:
                    self._finish(ended=False)
                    raise
                if isinstance(got, list):
                    self._chunk.extend(got)
                else:
                    self._chunk.append(got)
            item = self._chunk.popleft()
            self._pulled += 1
            shaped = self._shape(item, self)
            if shaped is not _SKIP:
                return shaped
            if self._post is not None:
                self._post.skipped(self._pulled - 1)

    def __next__(self):
        if self._raw and self._chunk:  # samples as they are: nothing to shape
            self._pulled += 1
            return self._chunk.popleft()
        if self._post is not None:
            return self._post.next()
        return self._pull()

    def _used(self) -> int:
        """Items of the run the loop has had (or that were dropped on the way to it)."""
        return self._post.used() if self._post is not None else self._pulled

    def _save(self) -> None:
        if self._run is None:
            return
        self._run.used(self._used())
        self._pipe._state = self._run.state() or None

    def _finish(self, ended: bool) -> None:
        if self._run is None:
            return
        if self._pid != _os.getpid():  # inherited by a fork: its threads are not here
            _inherited.append(self._run)
            self._run = None
            return
        if not ended:
            self._save()
        stats = self._run.stats()
        stats["skipped"] = stats.get("skipped", 0) + self._skipped
        self._pipe._last_stats = stats
        self._run.close()
        self._run = None
        if ended:
            self._pipe._epoch += 1
            self._pipe._state = None
        if self._pipe._current() is self:
            self._pipe._active = None

    def close(self) -> None:
        """Stops the run now; the pipeline keeps the position reached."""
        if self._post is not None:
            self._post.close()
        self._finish(ended=False)

    def stats(self) -> Dict[str, Any]:
        """This run's statistics (see :meth:`Pipeline.stats`)."""
        if self._run is None:
            return dict(self._pipe._last_stats)
        stats = self._run.stats()
        stats["skipped"] = stats.get("skipped", 0) + self._skipped
        return stats

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


_SKIP = object()  # an item left out on the way (its to_tuple field missing, skipped on error)


class _Shape:
    """Makes what the loop gets from what the run hands over: image batches as tensors (or
    the fields to_tuple asks for), samples as dicts or tuples, batches collated."""

    def __init__(self, spec: Dict[str, Any], images: bool):
        self._tuple = [f.split(";") for f in spec["tuple"]] if spec["tuple"] is not None else None
        self._names = spec["tuple"]
        self._skip = spec["on_error"] == "skip"
        self._roles = _tuple_roles(spec)
        self._images = self._roles is not None
        self._batches = spec["collate"] is not None
        self._decoded = spec["decode"] is not None

    def __call__(self, item, epoch: "Epoch"):
        torch = epoch._torch
        if self._images:
            if torch is None:
                return item
            images = torch.from_dlpack(item.images)
            labels = torch.from_dlpack(item.labels)
            if self._tuple is None:
                return (images, labels, item.keys) if epoch._keys else (images, labels)
            have = {"images": images, "labels": labels, "keys": item.keys}
            return tuple(have[r] if isinstance(r, str) else _column(item.columns[r[1]], torch) for r in self._roles)
        if self._decoded and self._batches:  # columns of decoded fields, named as to_tuple names them
            cols = {k: (v if k.startswith("__") else _column(v, torch)) for k, v in item.items()}
            return tuple(cols[n] for n in self._names) if self._names is not None else cols
        if self._decoded:
            item = {k: (_tensors(v, torch) if _is_image(k) else v) for k, v in item.items()}
        elif self._batches:
            item = {k: (_collate(v, torch) if not k.startswith("__") else v) for k, v in item.items()}
        if self._tuple is None:
            return item
        return self._pick_batch(item, epoch) if self._batches else self._pick(item, epoch)

    def _pick(self, sample: Dict[str, Any], epoch: "Epoch"):
        out = []
        for alts in self._tuple:
            for a in alts:
                if a in sample:
                    out.append(sample[a])
                    break
            else:
                return self._missing(alts, sample.get("__key__"), sample.get("__url__"), [k for k in sample if not k.startswith("__")], epoch)
        return tuple(out)

    def _pick_batch(self, batch: Dict[str, Any], epoch: "Epoch"):
        out = []
        for alts in self._tuple:
            col = None
            for a in alts:
                if a in batch and not (isinstance(batch[a], list) and any(v is None for v in batch[a])):
                    col = batch[a]
                    break
            if col is None:
                # Each sample may have another of the alternatives: take the first present per sample.
                present = [a for a in alts if a in batch]
                keys = batch["__key__"]
                picked = []
                for i, key in enumerate(keys):
                    for a in present:
                        v = batch[a][i] if isinstance(batch[a], list) else batch[a][i]
                        if v is not None:
                            picked.append(v)
                            break
                    else:
                        fields = [k for k in batch if not k.startswith("__") and batch[k][i] is not None]
                        return self._missing(alts, key, batch["__url__"][i], fields, epoch)
                col = picked
            out.append(col)
        return tuple(out)

    def _missing(self, alts, key, url, fields, epoch: "Epoch"):
        what = f"to_tuple: sample {key!r} of {url!r} has no field {';'.join(alts)!r} (it has: {', '.join(fields) or 'none'})"
        if self._skip and not self._batches:
            epoch._skipped += 1
            _log_skip(what)
            return _SKIP
        raise Error(what)


_IMAGE_EXTENSIONS = {"jpg", "jpeg", "jpe", "jfif", "png", "webp", "avif"}


def _is_image(field: str) -> bool:
    return field.rsplit(".", 1)[-1].lower() in _IMAGE_EXTENSIONS


def _tensors(v: Any, torch) -> Any:
    """A decoded column or value: NumPy arrays of images and stacked values as torch tensors
    (no copy) when torch is loaded; lists as they are."""
    if torch is not None and type(v).__module__ == "numpy" and hasattr(v, "flags"):
        if not v.flags.writeable:  # a view into a shard's bytes: torch wants memory it may write
            v = v.copy()
        if not v.dtype.isnative:
            v = v.astype(v.dtype.newbyteorder("="))
        try:
            return torch.from_numpy(v)
        except TypeError:  # a type torch has not (uint16, uint32, uint64): the array as it is
            return v
    return v


def _column(v: Any, torch) -> Any:
    """A batch's column from C++: stacked values as a tensor; a list (values that did not
    stack, or values a Python stage put in) collated as webdataset collates."""
    return _collate(v, torch) if isinstance(v, list) else _tensors(v, torch)


def _collate(values: List[Any], torch) -> Any:
    """A batch's column as webdataset's default collation makes it: numbers a tensor (NumPy
    array without torch), same-shape arrays or tensors stacked, anything else a list."""
    if not values or any(v is None for v in values):
        return values
    first = values[0]
    if isinstance(first, (bool, int, float)) and all(isinstance(v, (bool, int, float)) for v in values):
        if torch is not None:
            return torch.tensor(values)
        import numpy

        return numpy.array(values)
    if torch is not None and isinstance(first, torch.Tensor):
        if all(isinstance(v, torch.Tensor) and v.shape == first.shape and v.dtype == first.dtype for v in values):
            return torch.stack(values)
        return values
    np = _sys.modules.get("numpy")
    if np is not None and isinstance(first, np.ndarray):
        if all(isinstance(v, np.ndarray) and v.shape == first.shape and v.dtype == first.dtype for v in values):
            stacked = np.stack(values)
            return torch.from_numpy(stacked) if torch is not None else stacked
    return values


_logged_skips: set = set()


def _log_skip(what: str) -> None:
    import logging

    stage = what.split(":", 1)[0]
    if stage not in _logged_skips:  # once per kind: a dataset with many such items logs one line
        _logged_skips.add(stage)
        logging.getLogger("conveyor").warning("skipped (on_error='skip'; counted in stats()['skipped']): %s", what)


class _PostStages:
    """The Python stages on what the pipeline yields (batches, tuples): each item's calls
    on a pool of threads, ahead of the loop by twice the threads, in order (unless every
    stage says ``ordered=False``). Tracks which items the loop has had, for the state."""

    def __init__(self, ops: List[Dict[str, Any]], on_error: str, epoch: "Epoch"):
        from concurrent.futures import ThreadPoolExecutor

        self._ops = ops
        self._skip = on_error == "skip"
        self._epoch = epoch
        self._threads = max(op["threads"] for op in ops)
        self._ordered = any(op["ordered"] for op in ops)
        self._pool = ThreadPoolExecutor(max_workers=self._threads, thread_name_prefix="conveyor-map")
        self._pending: "collections.deque" = _collections.deque()  # (seq, future), in submission order
        self._ended = False
        self._done: set = set()  # seqs done (had by the loop, dropped, skipped) beyond the prefix
        self._prefix = 0  # every item below this has been had by the loop or dropped

    def _call(self, item):
        for op in self._ops:
            try:
                r = op["fn"](item)
            except Exception as e:
                name = getattr(op["fn"], "__name__", type(op["fn"]).__name__)
                raise _StageError(f"{op['op']}({name}) failed: {type(e).__name__}: {e}") from e
            if op["op"] == "filter":
                if not r:
                    return _SKIP
            else:
                item = r
        return item

    def _fill(self) -> None:
        while not self._ended and len(self._pending) < 2 * self._threads:
            try:
                item = self._epoch._pull()
            except StopIteration:
                self._ended = True
                break
            self._pending.append((self._epoch._pulled - 1, self._pool.submit(self._call, item)))

    def next(self):
        from concurrent.futures import FIRST_COMPLETED, wait

        while True:
            self._fill()
            if not self._pending:
                raise StopIteration
            if self._ordered:
                seq, fut = self._pending.popleft()
            else:
                finished, _ = wait([f for _, f in self._pending], return_when=FIRST_COMPLETED)
                seq, fut = next((s, f) for s, f in self._pending if f in finished)
                self._pending.remove((seq, fut))
            try:
                r = fut.result()
            except _StageError as e:
                if not self._skip:
                    self.close()
                    self._epoch.close()
                    raise Error(str(e)) from e.__cause__
                self._epoch._skipped += 1
                _log_skip(str(e))
                r = _SKIP
            self._mark(seq)
            if r is not _SKIP:
                return r

    def skipped(self, seq: int) -> None:
        self._mark(seq)

    def _mark(self, seq: int) -> None:
        self._done.add(seq)
        while self._prefix in self._done:
            self._done.discard(self._prefix)
            self._prefix += 1

    def used(self) -> int:
        return self._prefix

    def close(self) -> None:
        for _, f in self._pending:
            f.cancel()
        self._pending.clear()
        self._pool.shutdown(wait=True, cancel_futures=True)


class _StageError(Exception):
    pass
