"""S3 objects and S3 shards through the builder, against the local S3 server (s3rver behind the
SigV4-checking proxy of tests/s3/server): objects uploaded with botocore, read back with
conveyor.s3(...) and conveyor.shards("s3://...") through a JSON credentials file (config=),
giving the same pixels, labels and keys as the same data read locally.

Run by the ctest python-s3, through tests/s3/server/with_s3_server.sh, which starts the
servers and sets CONVEYOR_TEST_S3_*; skipped without them (the python-pipeline run)."""

import json
import os

import pytest

if not os.environ.get("CONVEYOR_TEST_S3_ENDPOINT"):
    pytest.skip(
        "no local S3 server: run under tests/s3/server/with_s3_server.sh (ctest -R python-s3)", allow_module_level=True
    )

torch = pytest.importorskip("torch", reason="PyTorch (Debian python3-torch) is not installed")
pytest.importorskip("PIL.Image", reason="PIL (Debian python3-pil) is not installed")
botocore_session = pytest.importorskip("botocore.session", reason="botocore (Debian python3-botocore) is not installed")
conveyor = pytest.importorskip(
    "conveyor", reason="the conveyor module is not built (needs pybind11-dev and python3-dev) or not on PYTHONPATH"
)

from conftest import CLASSES, SIZES  # noqa: E402

ENDPOINT = os.environ.get("CONVEYOR_TEST_S3_ENDPOINT", "")
BUCKET = os.environ.get("CONVEYOR_TEST_S3_BUCKET", "")
PREFIX = "python-tests"


@pytest.fixture(scope="module")
def s3_client():
    from botocore.config import Config

    return botocore_session.get_session().create_client(
        "s3",
        endpoint_url=ENDPOINT,
        region_name=os.environ["CONVEYOR_TEST_S3_REGION"],
        aws_access_key_id=os.environ["CONVEYOR_TEST_S3_ACCESS_KEY"],
        aws_secret_access_key=os.environ["CONVEYOR_TEST_S3_SECRET_KEY"],
        config=Config(s3={"addressing_style": "path"}),
    )


@pytest.fixture(scope="module")
def credentials(tmp_path_factory):
    """The seeds' JSON credentials file: keys, endpoint and the default bucket."""
    path = tmp_path_factory.mktemp("s3") / "credentials.json"
    path.write_text(
        json.dumps(
            {
                "aws_access_key_id": os.environ["CONVEYOR_TEST_S3_ACCESS_KEY"],
                "aws_secret_access_key": os.environ["CONVEYOR_TEST_S3_SECRET_KEY"],
                "endpoint_url": ENDPOINT,
                "bucket_name": BUCKET,
            }
        )
    )
    return str(path)


@pytest.fixture(scope="module")
def uploaded(s3_client, folder, shard_set):
    """The image folder under PREFIX/train/ and the shards under PREFIX/shards/."""
    for c in CLASSES:
        for i in range(len(SIZES)):
            s3_client.put_object(Bucket=BUCKET, Key=f"{PREFIX}/train/{c}/{i}.jpg", Body=(folder / c / f"{i}.jpg").read_bytes())
    for p in shard_set.paths:
        with open(p, "rb") as f:
            s3_client.put_object(Bucket=BUCKET, Key=f"{PREFIX}/shards/{os.path.basename(p)}", Body=f.read())
    return True


def centre(pipe):
    return pipe.decode(32, crop="center", dct_scaling=False).batch(4).keys()


def local_images(folder):
    pipe = centre(conveyor.files(folder, shuffle=False, threads=2, rank=0, world_size=1))
    return {k: (x.clone(), int(y)) for images, labels, keys in pipe for k, x, y in zip(keys, images, labels)}


def test_objects_under_a_prefix_read_as_the_same_files_do_locally(uploaded, credentials, folder):
    want = local_images(folder)
    pipe = centre(
        conveyor.s3(f"s3://{BUCKET}/{PREFIX}/train/", labels=True, config=credentials, threads=2, rank=0, world_size=1)
    )
    assert len(pipe) == 3
    got = {}
    for images, labels, keys in pipe:
        for k, x, y in zip(keys, images, labels):
            got[k] = (x.clone(), int(y))
    assert len(got) == 9
    for key, (x, y) in got.items():
        assert key.startswith(f"{PREFIX}/train/"), key  # object keys, relative to the bucket
        rel = key[len(f"{PREFIX}/train/") :]
        assert rel in want, key
        assert torch.equal(x, want[rel][0]), key
        assert y == want[rel][1] == CLASSES.index(rel.split("/")[0]), key


def test_objects_by_keys_and_by_a_local_index(uploaded, credentials, tmp_path):
    keys = [f"{PREFIX}/train/dog/{i}.jpg" for i in range(3)]
    by_keys = centre(conveyor.s3(bucket=BUCKET, keys=keys, shuffle=False, config=credentials, threads=2, rank=0, world_size=1))
    got = [k for _, _, ks in by_keys for k in ks]
    assert got == keys

    index = tmp_path / "index.json"
    index.write_text(json.dumps(keys))
    # The bucket comes from the credentials file's bucket_name.
    by_index = centre(conveyor.s3(index=str(index), shuffle=False, config=credentials, threads=2, rank=0, world_size=1))
    assert len(by_index) == 1
    assert [k for _, _, ks in by_index for k in ks] == got


def test_a_missing_object_is_an_error_naming_it(uploaded, credentials):
    pipe = centre(conveyor.s3(bucket=BUCKET, keys=[f"{PREFIX}/absent.jpg"], config=credentials, threads=2, rank=0, world_size=1))
    with pytest.raises(conveyor.Error) as e:
        for _ in pipe:
            pass
    msg = str(e.value)
    assert "'s3'" in msg and f"s3://{BUCKET}/{PREFIX}/absent.jpg" in msg and "NoSuchKey" in msg, msg


def test_s3_shards_give_the_batches_of_the_same_shards_read_locally(uploaded, credentials, shard_set):
    def augmented(spec, **s3):
        return (
            conveyor.shards(spec, seed=9, shards_in_flight=4, threads=2, rank=0, world_size=1, **s3)
            .shuffle(10)
            .decode(32, crop="random_resized", flip=True)
            .batch(8)
            .keys()
        )

    local = [(x.clone(), y.clone(), k) for x, y, k in augmented(shard_set.pattern)]
    remote = [
        (x.clone(), y.clone(), k)
        for x, y, k in augmented(f"s3://{BUCKET}/{PREFIX}/shards/shard-{{000000..000005}}.tar", config=credentials)
    ]
    assert [k for _, _, k in remote] == [k for _, _, k in local]
    for (lx, ly, _), (rx, ry, _) in zip(local, remote):
        assert torch.equal(lx, rx) and torch.equal(ly, ry)
    assert sorted(k for _, _, ks in remote for k in ks) == sorted(shard_set.keys)


def gets_for(key):
    """How many GETs the SigV4 proxy has seen for an object of the test bucket."""
    import urllib.parse
    import urllib.request

    path = urllib.parse.quote(f"/{BUCKET}/{key}", safe="/~")
    url = os.environ["CONVEYOR_TEST_S3_ADMIN"] + "/stats?path=" + urllib.parse.quote(path, safe="")
    with urllib.request.urlopen(url) as r:
        return json.loads(r.read())["count"]


def test_objects_through_a_node_cache_are_fetched_once_for_two_epochs(uploaded, credentials, tmp_path):
    keys = [f"{PREFIX}/train/cat/{i}.jpg" for i in range(3)]
    cache = tmp_path / "cache"
    pipe = centre(conveyor.s3(bucket=BUCKET, keys=keys, shuffle=False, cache=cache, config=credentials, threads=2, rank=0, world_size=1))
    before = [gets_for(k) for k in keys]
    first = [(k, x.clone()) for images, _, ks in pipe for k, x in zip(ks, images)]
    assert [gets_for(k) - b for k, b in zip(keys, before)] == [1, 1, 1]
    assert len(list(cache.iterdir())) > 0  # the objects' files, named by hashes of their keys
    second = [(k, x.clone()) for images, _, ks in pipe for k, x in zip(ks, images)]
    assert [gets_for(k) - b for k, b in zip(keys, before)] == [1, 1, 1]  # the second epoch read the folder
    assert [k for k, _ in first] == [k for k, _ in second] == keys
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(first, second))
