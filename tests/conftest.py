from __future__ import annotations

import os
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

# Cache compiled modules and pytest's assertion rewrites of the test modules (in __pycache__, which
# git ignores) even where PYTHONDONTWRITEBYTECODE is set: without the cache every worker rewrites
# each test module afresh, about 7 s of CPU a worker at collection.
sys.dont_write_bytecode = False

# One OpenMP thread per process, set before torch loads: the suite runs one worker per core
# (pytest-xdist) and tests start servers and child processes beside them; on a busy CPU, thread
# teams spinning at barriers ran up to ~10x slower than one thread (see llm/ct2.default_threads).
for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "PERSONAMEM_LLM_THREADS"):
    os.environ.setdefault(_name, "1")
# ranx's metrics run as plain Python, here and in the tests' child processes: compiling its numba
# kernels costs ~30-40 s of CPU on a fresh install (every CI run), while the suite's evaluations take
# ~3 s interpreted at 2,000 questions, with the same scores. NUMBA_DISABLE_JIT=0 runs them compiled.
os.environ.setdefault("NUMBA_DISABLE_JIT", "1")

import pytest  # noqa: E402

from personamem import PersonaMem, Record, SentenceEncoder, default_encoder  # noqa: E402
from personamem.llm import TransformersLLM  # noqa: E402
from personamem.llm.ct2 import CTranslate2LLM  # noqa: E402
from personamem.llm.packaged import local_model_path  # noqa: E402
from personamem.user_cache import make_once  # noqa: E402

DATA = Path(os.environ.get("PERSONAMEM_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def need_data(path: Path) -> Path:
    """``path`` if the benchmark data is there; otherwise skip the test, naming where it looked."""
    if not path.exists():
        pytest.skip(f"benchmark data not found at {path} (set PERSONAMEM_DATA)")
    return path


def records_by_user(records: list[Record]) -> dict[str, dict[str, Record]]:
    """Index records by user then id, checking on the way that ids are unique per user."""
    index: dict[str, dict[str, Record]] = defaultdict(dict)
    for record in records:
        assert record.id not in index[record.user_id], f"duplicate id {record.id} for {record.user_id}"
        index[record.user_id][record.id] = record
    return index


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """One worker more than cores for ``-n auto``: with one per core, a sixth of the CPU sat idle while
    tests waited on servers, child processes and the browser; the spare worker fills that time."""
    return (os.cpu_count() or 1) + 1


@pytest.fixture(scope="session")
def encoder() -> SentenceEncoder:
    """The real default encoder, loaded once per test session."""
    return default_encoder()


@pytest.fixture
def mem(tmp_path: Path, encoder: SentenceEncoder) -> Iterator[PersonaMem]:
    with PersonaMem.open(tmp_path / "store", encoder=encoder) as memory:
        yield memory


@pytest.fixture(scope="session")
def llm() -> TransformersLLM:
    """The real default frozen LLM (SmolLM2-135M-Instruct), loaded once per test session."""
    return TransformersLLM.default()


@pytest.fixture(scope="session")
def ct2_llm() -> CTranslate2LLM:
    """The same model on the pipeline's default runtime (CTranslate2, int8): ~2.6x faster decoding,
    for tests of what runs around the LLM rather than of the reference scores."""
    local_model_path("smollm2-135m")  # the reference's float32 copy, which the conversion then reads
    return CTranslate2LLM.local("smollm2-135m", threads=1)


@pytest.fixture
def ana_memory(mem: PersonaMem) -> PersonaMem:
    """A small real memory: three records of a vegan cyclist, one of another user."""
    for text in (
        "I'm vegan and avoid dairy.",
        "I cycle to work every day.",
        "Spicy curries are my favourite.",
    ):
        mem.add("ana", text)
    mem.add("bo", "I love steak houses.")
    return mem


def built_once(
    tmp_path_factory: pytest.TempPathFactory, worker_id: str, name: str, build: Callable[[Path], Path]
) -> Path:
    """What ``build(folder)`` returns, built by whichever xdist worker asks first; the others wait and
    reuse it (each training a toy checkpoint cost every worker seconds of CPU). The folder is under
    this run's own temporary root, so no run reuses another's."""
    root = tmp_path_factory.getbasetemp()
    root = root if worker_id == "master" else root.parent  # pytest-N: shared by this run's workers
    done = root / f"{name}.built"  # the built path, written whole once it is there

    def make() -> None:
        built = build(root / name)
        partial = done.with_suffix(".partial")
        partial.write_text(str(built), encoding="utf-8")
        partial.replace(done)

    make_once(done, make, lock=root / f"{name}.lock")
    return Path(done.read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def purple_checkpoint(
    tmp_path_factory: pytest.TempPathFactory, worker_id: str, encoder: SentenceEncoder
) -> Path:
    """A PURPLE checkpoint folder trained for two steps on the toy food reward (inference tests)."""
    from personamem.trainers.purple import train_purple
    from tests.trainers.test_purple_train import _config, _examples, food_reward

    def build(folder: Path) -> Path:
        train_purple(_examples(4), _examples(2, "v"), encoder, food_reward, _config(steps=2), folder)
        return folder / "best"

    return built_once(tmp_path_factory, worker_id, "purple", build)


@pytest.fixture(scope="session")
def pgret_checkpoint(
    tmp_path_factory: pytest.TempPathFactory, worker_id: str, encoder: SentenceEncoder, llm: TransformersLLM
) -> Path:
    """A PG-Ret query tower trained for two steps on the toy cook's logged queries (inference tests)."""
    from personamem.eval.judge import RelevanceJudge, calibrate
    from personamem.trainers.pgret.config import PGRetTrainConfig
    from personamem.trainers.pgret.trainer import train_pgret
    from tests.trainers.test_pgret import cook_logged

    def build(folder: Path) -> Path:
        config = PGRetTrainConfig(
            variant="conservative", steps=2, batch_size=2, pairs_per_query=3, validate_every=2, k=2
        )
        data = cook_logged(encoder)
        judge, calibration = RelevanceJudge(llm), calibrate([1.0, -1.0], [True, False])
        paths = {"base_model_path": encoder.path, "record_encoder": encoder}
        return train_pgret(data, data, judge, calibration, config, folder, **paths).best

    return built_once(tmp_path_factory, worker_id, "pgret", build)


@pytest.fixture(scope="module")
def purple(purple_checkpoint: Path) -> str:
    """``purple:<folder>`` of the session's toy checkpoint, as a method or selector name."""
    return f"purple:{purple_checkpoint}"


@pytest.fixture(scope="module")
def cook_mem(tmp_path_factory: pytest.TempPathFactory, encoder: SentenceEncoder) -> Iterator[PersonaMem]:
    """A cook with eight records (more than a 5-record profile) and another user."""
    from tests.trainers.test_purple_train import FOOD, OTHER

    with PersonaMem.open(tmp_path_factory.mktemp("cook") / "store", encoder=encoder) as memory:
        memory.add_many([{"id": f"r{i}", "text": t} for i, t in enumerate([*OTHER, *FOOD])], user_id="cook")
        memory.add("bob", "I love smoked brisket and pork ribs.")
        yield memory


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """Generate on one thread: on an oversubscribed CPU, torch's thread team ran ~8x slower than one."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
