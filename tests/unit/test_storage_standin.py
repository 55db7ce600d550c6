"""The Cloud Storage stand-in: the bucket map on files, and the real process answering google-cloud-storage,
the JSON API through its TLS proxy (as TensorFlow reaches it) and plain tunnels to other hosts."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import types

import httpx
import pytest

from multiworker.procs import pid_alive
from multiworker.spec.formats import LoadOptions, load_job
from multiworker.storage.buckets import BadName, BucketMap, Mount
from multiworker.storage.standin import StandIn


def _map(tmp_path, *mounts: str) -> BucketMap:
    return BucketMap(Mount.parse(m.format(tmp=tmp_path)) for m in mounts)


def test_names_map_to_files_and_the_longest_prefix_wins(tmp_path):
    buckets = _map(tmp_path, "gs://b={tmp}/all", "gs://b/data/big={tmp}/big")
    assert buckets.path("b", "x/y.txt") == tmp_path / "all" / "x" / "y.txt"
    assert buckets.path("b", "data/big/part-0") == tmp_path / "big" / "part-0"
    assert buckets.path("other", "x") is None
    for bad in ("a/../b", "a//b", "./a"):
        with pytest.raises(BadName):
            buckets.path("b", bad)


def test_listing_with_and_without_delimiter(tmp_path):
    buckets = _map(tmp_path, "gs://b={tmp}")
    buckets.write("b", "logs/train/events.1", [b"e"])
    buckets.write("b", "logs/", [])
    buckets.write("b", "a.txt", [b"abc"])
    (tmp_path / "empty").mkdir()
    items, prefixes = buckets.list("b", "", "/")
    assert [i.name for i in items] == ["a.txt"] and prefixes == ["empty/", "logs/"]
    items, prefixes = buckets.list("b", "logs/", "/")
    assert [i.name for i in items] == ["logs/"] and prefixes == ["logs/train/"]  # its placeholder, then its prefix
    items, _ = buckets.list("b", "lo")  # logs/train/ holds an object and was never a placeholder
    assert [i.name for i in items] == ["logs/", "logs/train/events.1"]


def test_directories_go_as_prefixes_go_and_placeholders_stay_until_deleted(tmp_path):
    """TensorFlow's rmtree deletes in name order: the placeholder m/ before m/f."""
    buckets = _map(tmp_path, "gs://b={tmp}")
    buckets.write("b", "x/y/z", [b"z"])
    assert buckets.stat("b", "x/") is None and not buckets.delete("b", "x/")
    assert buckets.delete("b", "x/y/z")
    assert not (tmp_path / "x").exists()  # the prefix is gone with its last object
    buckets.write("b", "m/", [])
    buckets.write("b", "m/f", [b"f"])
    assert buckets.delete("b", "m/")
    assert (tmp_path / "m" / "f").is_file()
    assert buckets.delete("b", "m/f") and not (tmp_path / "m").exists()
    buckets.write("b", "k/", [])
    buckets.write("b", "k/f", [b"f"])
    assert buckets.delete("b", "k/f") and buckets.stat("b", "k/") is not None  # kept: a placeholder
    assert tmp_path.is_dir()  # never the mapped directory itself


def test_load_job_records_the_mappings_as_absolute_paths(tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text("name: j\ncommand: ['true']\nargs: [gs://b/in]\npools: {worker: {replicas: 1}}\n")
    loaded = load_job(spec, LoadOptions(map_paths=["gs://b=./data"], cwd=tmp_path))
    assert loaded.map_paths == (f"gs://b={tmp_path / 'data'}",)
    assert loaded.spec.args == [str(tmp_path / "data" / "in")]


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    """One stand-in process for the tests below, stopped (and checked gone) after them."""
    tmp_path = tmp_path_factory.mktemp("standin")
    data = tmp_path / "data"
    (data / "train").mkdir(parents=True)
    (data / "train" / "part-0.tfrec").write_bytes(b"0123456789")
    server = StandIn([f"gs://my-bucket={data}"], tmp_path / "storage", job_id="standin-test")
    server.start()
    server.data = data
    pid = server.proc.pid if server.proc else None
    yield server
    server.stop()
    assert pid is not None and not pid_alive(pid)


@pytest.fixture
def standin(running, monkeypatch):
    for name, value in running.env().items():
        monkeypatch.setenv(name, value)
    return running


def test_google_cloud_storage_reads_writes_and_lists_the_directory(standin):
    from google.api_core.exceptions import Conflict
    from google.cloud import storage

    client = storage.Client()
    bucket = client.bucket("my-bucket")
    bucket.blob("notes/run 1/result.json").upload_from_string('{"ok": 1}')
    assert (standin.data / "notes" / "run 1" / "result.json").read_text() == '{"ok": 1}'
    assert bucket.blob("train/part-0.tfrec").download_as_bytes() == b"0123456789"
    names = [b.name for b in client.list_blobs("my-bucket", prefix="train/")]
    assert names == ["train/part-0.tfrec"]
    big = bytes(range(256)) * 10_000  # a resumable upload in 1 MiB chunks
    blob = bucket.blob("big.bin", chunk_size=256 * 1024 * 4)
    blob.upload_from_string(big)
    assert (standin.data / "big.bin").read_bytes() == big
    bucket.blob("big.bin").delete()
    assert not (standin.data / "big.bin").exists()
    with pytest.raises(Exception, match="not mapped"):
        client.bucket("elsewhere").blob("x").download_as_bytes()
    with pytest.raises(Conflict):
        client.create_bucket("my-bucket")
    assert client.get_bucket("my-bucket").name == "my-bucket"


def test_googles_hosts_through_the_proxy_with_the_jobs_ca(standin):
    """As TensorFlow's libcurl reaches it: HTTPS_PROXY, CURL_CA_BUNDLE, Google's own URLs."""
    env = standin.env()
    verify = ssl.create_default_context(cafile=env["CURL_CA_BUNDLE"])
    with httpx.Client(proxy=env["HTTPS_PROXY"], verify=verify, trust_env=False) as client:
        media = client.get("https://storage.googleapis.com/my-bucket/train%2Fpart-0.tfrec",
                           headers={"Range": "bytes=2-5"})
        assert media.status_code == 206 and media.content == b"2345"
        listing = client.get("https://www.googleapis.com/storage/v1/b/my-bucket/o", params={"prefix": "train/"})
        assert [i["name"] for i in listing.json()["items"]] == ["train/part-0.tfrec"]
    # TensorFlow's upload, as libcurl sends it (Transfer-Encoding: identity), and its Location header's spelling
    host, port = env["HTTPS_PROXY"].removeprefix("http://").split(":")
    conn = http.client.HTTPSConnection(host, int(port), context=verify, timeout=30)
    conn.set_tunnel("www.googleapis.com", 443)
    conn.putrequest("POST", "/upload/storage/v1/b/my-bucket/o?uploadType=resumable&name=ckpt%2Fcheckpoint")
    for name, value in (("Content-Length", "0"), ("Transfer-Encoding", "identity"), ("X-Upload-Content-Length", "5")):
        conn.putheader(name, value)
    conn.endheaders()
    start = conn.getresponse()
    body = start.read()
    headers = dict(start.getheaders())
    assert start.status == 200 and "Location" in headers, (start.status, headers, body[:500])
    location = headers["Location"]
    assert location.startswith("https://www.googleapis.com/upload/")
    conn.request("PUT", location.removeprefix("https://www.googleapis.com"), body=b"model",
                 headers={"Content-Range": "bytes 0-4/5"})
    done = conn.getresponse()
    assert done.status == 200 and json.loads(done.read())["size"] == "5"
    conn.close()
    assert (standin.data / "ckpt" / "checkpoint").read_bytes() == b"model"


def test_other_tunnels_go_where_they_asked(standin):
    env = standin.env()
    host, port = env["HTTPS_PROXY"].removeprefix("http://").split(":")
    target = env["STORAGE_EMULATOR_HOST"].removeprefix("http://")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        sock.sendall(b"GET /storage/v1/b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 200") and b'"my-bucket"' in reply


def test_a_tensorflow_without_a_gcs_filesystem_is_named_in_one_line(tmp_path, monkeypatch):
    from multiworker.storage import standin

    tf_dir = tmp_path / "tensorflow"
    tf_dir.mkdir()
    specs = {"tensorflow": types.SimpleNamespace(submodule_search_locations=[str(tf_dir)])}
    monkeypatch.setattr(standin.importlib.util, "find_spec", lambda name: specs.get(name))
    (tf_dir / "libtensorflow_framework.so.2").write_bytes(b"\0no cloud filesystem here\0")
    note = standin.tensorflow_gcs_note()
    assert note is not None and "\n" not in note and "pip install tensorflow-io-gcs-filesystem" in note
    (tf_dir / "libtensorflow_framework.so.2").write_bytes(b"\0https://www.googleapis.com/upload/storage/v1/\0")
    assert standin.tensorflow_gcs_note() is None  # built in, as in the Linux wheels
    (tf_dir / "libtensorflow_framework.so.2").unlink()
    specs["tensorflow_io_gcs_filesystem"] = types.SimpleNamespace(submodule_search_locations=[])
    assert standin.tensorflow_gcs_note() is None  # the plugin
