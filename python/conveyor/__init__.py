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

import copy as _copy
import json as _json
import math as _math
import os as _os
import weakref as _weakref
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from . import _conveyor
from ._conveyor import Error, center_crop
from ._conveyor import __version__  # the C++ headers' version (include/conveyor/version.hpp)

__all__ = [
    "Error",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "Pipeline",
    "Epoch",
    "files",
    "s3",
    "shards",
    "merge_states",
    "environment_split",
    "center_crop",
]

#: ImageNet's per-channel RGB mean and standard deviation (pixels in [0, 1]), as
#: torchvision's pretrained models expect them: ``batch(dtype="float16", mean=IMAGENET_MEAN, std=IMAGENET_STD)``.
IMAGENET_MEAN: Tuple[float, float, float] = (0.485, 0.456, 0.406)
IMAGENET_STD: Tuple[float, float, float] = (0.229, 0.224, 0.225)

_STATE_FORMAT = "conveyor-python-state"

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
    extensions: Sequence[str] = (".jpg", ".jpeg", ".png"),
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
    extensions: Sequence[str] = (".jpg", ".jpeg", ".png"),
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
    merged = _conveyor.merge_progress(begun) if begun else ""  # "": no rank had used anything yet
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
        self._spec.setdefault("output", "torch")
        self._dataset = None  # the resolved source (listing, shard list, clients): made once
        self._runtime = None
        self._epoch = 0
        self._state: Optional[str] = None  # progress JSON of the current epoch
        self._last_stats: Dict[str, Any] = {}
        self._active: Optional["_weakref.ref[Epoch]"] = None  # weak: dropping the iterator stops its run
        self._pid: Optional[int] = None  # the process that resolved the source

    # ---- building -------------------------------------------------------------------

    def _with(self, **changes) -> "Pipeline":
        spec = _copy.deepcopy(self._spec)
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
        return self._with(shuffle=_section("shuffle", {"buffer": int(buffer), "seed": seed}, options))

    def decode(
        self,
        size: Union[int, Tuple[int, int]] = 224,
        *,
        crop: str = "random_resized",
        flip: Union[bool, float] = False,
        scale: Tuple[float, float] = (0.08, 1.0),
        ratio: Tuple[float, float] = (3 / 4, 4 / 3),
        center_fraction: float = 0.875,
        dct_scaling: bool = True,
        seed: Optional[int] = None,
        fields: Sequence[str] = ("jpg", "jpeg", "png"),
        label_field: str = "cls",
        label_map: Union[str, "os.PathLike[str]", None] = None,
        first_number: Optional[int] = None,
        **options: Any,
    ) -> "Pipeline":
        """Decodes each JPEG or PNG (libjpeg-turbo, libspng) on the compute threads, cropped
        and resized to ``size`` (an int: square; or (height, width)), RGB.

        ``crop``: ``"random_resized"`` (torchvision's RandomResizedCrop with ``scale`` and
        ``ratio``), ``"center"`` (the central ``center_fraction`` of the shorter side, as
        ``Resize(256) + CenterCrop(224)`` keeps) or ``"none"`` (the whole image resized).
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
        if isinstance(size, int):
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
        return self._with(decode=section, label_map_file=_os.fspath(label_map) if label_map is not None else "")

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
        """Collates ``size`` decoded images into one tensor, each decoded straight into its
        place: ``uint8`` pixels as decoded, or ``float32``/``float16`` normalized as
        torchvision's ``ToTensor()`` + ``Normalize(mean, std)`` (defaults: 0 and 1);
        ``layout`` ``"nhwc"`` or ``"nchw"``. ``partial=False`` drops a last, smaller batch. ``options``: further fields of
        ``conveyor::image::collate_options`` by name (``capacity``, ``slabs``)."""
        if self._spec["decode"] is None:
            raise ValueError("batch() comes after decode()")
        if size < 1:
            raise ValueError("batch size must be at least 1")
        if dtype not in ("uint8", "float32", "float16"):
            raise ValueError(f"dtype must be 'uint8', 'float32' or 'float16', not {dtype!r}")
        if layout not in ("nhwc", "nchw"):
            raise ValueError(f"layout must be 'nhwc' or 'nchw', not {layout!r}")

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
        if self._spec["collate"] is None:
            raise ValueError("to_cuda() comes after batch()")
        if buffers < 2:
            raise ValueError("to_cuda needs at least 2 buffers (one being copied, one held)")
        # Checked when the pipeline is resolved: a build without CUDA has no staging_options.
        return self._with(to_cuda={"device": int(device), "ring": int(buffers), **options})

    def keys(self, on: bool = True) -> "Pipeline":
        """Also yield each batch's keys (sample keys, or file and object keys):
        ``for images, labels, keys in pipe``."""
        return self._with(with_keys=bool(on))

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
            if self._spec["collate"] is None:
                raise ValueError("a pipeline must end in batch() (and optionally to_cuda()) to be iterated")
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
            self._dataset = _conveyor.Dataset(self._runtime, self._spec, rank, world, worker, workers)
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
            _conveyor.check_progress(state["progress"])
        self._stop_active()
        self._epoch = int(state["epoch"])
        self._state = state["progress"] or None


class Epoch:
    """The iterator of one epoch of a :class:`Pipeline` (what ``iter(pipe)`` returns).
    Dropping it, or :meth:`close`, stops the run: every thread's work on it ends and its
    memory and descriptors are given back. Ctrl-C while it waits stops it too."""

    def __init__(self, pipe: Pipeline, run):
        self._pipe = pipe
        self._run = run
        self._pid = _os.getpid()
        self._torch = None
        if pipe._spec["output"] == "torch":
            try:
                import torch
            except ImportError as e:  # pragma: no cover - depends on the installation
                raise ImportError("conveyor yields torch tensors: install PyTorch, or use .dlpack() for DLPack objects") from e
            self._torch = torch
        self._keys = pipe._spec["with_keys"]

    def __iter__(self) -> "Epoch":
        return self

    def __next__(self):
        if self._run is None:
            raise StopIteration
        try:
            b = self._run.next()
        except StopIteration:
            self._finish(ended=True)
            raise
        except BaseException:
            self._finish(ended=False)
            raise
        if self._torch is None:
            return b
        images = self._torch.from_dlpack(b.images)
        labels = self._torch.from_dlpack(b.labels)
        if self._keys:
            return images, labels, b.keys
        return images, labels

    def _save(self) -> None:
        if self._run is None:
            return
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
        self._pipe._last_stats = self._run.stats()
        self._run.close()
        self._run = None
        if ended:
            self._pipe._epoch += 1
            self._pipe._state = None
        if self._pipe._current() is self:
            self._pipe._active = None

    def close(self) -> None:
        """Stops the run now; the pipeline keeps the position reached."""
        self._finish(ended=False)

    def stats(self) -> Dict[str, Any]:
        """This run's statistics (see :meth:`Pipeline.stats`)."""
        return self._run.stats() if self._run is not None else dict(self._pipe._last_stats)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
