"""The contract through ``PersonaMem.connect`` against a real Chroma server on 127.0.0.1."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from personamem import PersonaMem, SentenceEncoder
from personamem.testing import MemoryContract

pytestmark = [pytest.mark.server, pytest.mark.enable_socket]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def chroma_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    exe = shutil.which("chroma", path=str(Path(sys.executable).parent)) or shutil.which("chroma")
    if exe is None:
        pytest.fail("the `chroma` executable (shipped with chromadb) was not found")
    port = _free_port()
    data = tmp_path_factory.mktemp("chroma-server")
    log = (data / "server.log").open("wb")
    proc = subprocess.Popen(
        [exe, "run", "--path", str(data / "db"), "--host", "127.0.0.1", "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/api/v2/heartbeat", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"chroma server did not start: {(data / 'server.log').read_text()[-2000:]}")
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


class TestServerMemory(MemoryContract):
    @pytest.fixture
    def mem(self, tmp_path: Path, chroma_url: str, encoder: SentenceEncoder) -> Iterator[PersonaMem]:
        with PersonaMem.connect(
            f"sqlite:///{tmp_path / 'catalog.sqlite'}", chroma_url=chroma_url, encoder=encoder
        ) as m:
            yield m
            for user in m.users():  # the server outlives the test: leave it empty for the next one
                m.forget(user)


def test_connect_needs_exactly_one_vector_location(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        PersonaMem.connect(f"sqlite:///{tmp_path / 'x.sqlite'}")
