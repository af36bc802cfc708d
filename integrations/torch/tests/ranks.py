"""Launching the ranks of a torch-backend test as subprocesses.

Each rank runs ``worker.py SCENARIO ARGS`` with the variables torchrun and
``choir run`` set (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), so
``init_process_group(init_method="env://")`` works unchanged. Every launch has
a wall-clock limit; on expiry every rank is killed by its PID (each rank leads
its own process group, so helpers it started go too) and the launch fails
with the ranks' output. Nothing is skipped: a missing build is an error.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
BUILD_DIR = Path(os.environ.get("CHOIR_BUILD_DIR", REPO / "build" / "release"))
PYTHON_DIR = BUILD_DIR / "python"
WORKER = Path(__file__).resolve().parent / "worker.py"


def check_build():
    """Raises with instructions when the extension has not been built."""
    package = PYTHON_DIR / "choir" / "torch"
    if not list(package.glob("_C*.so")):
        raise RuntimeError(
            f"choir.torch is not built: no {package}/_C*.so. Build it with "
            "`cmake --preset release -DPython3_EXECUTABLE=/usr/bin/python3 && "
            "cmake --build build/release --target choir_torch_module`, or point CHOIR_BUILD_DIR at "
            "the build tree.")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Rank:
    rank: int
    returncode: int
    output: str
    result: object  # the JSON the worker wrote, or None


class LaunchError(AssertionError):
    pass


def launch(scenario, world_size, *args, timeout=90, env=None, allow_failure=False):
    """Runs `world_size` ranks of `scenario`; returns one Rank per rank.

    Raises LaunchError when the launch exceeds `timeout` seconds, or (unless
    `allow_failure`) when a rank exits nonzero or writes no result.
    """
    check_build()
    port = free_port()
    tmp = Path(tempfile.mkdtemp(prefix="choir-torch-test-"))
    procs = []
    try:
        for r in range(world_size):
            rank_env = dict(os.environ)
            rank_env.update({
                "RANK": str(r), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(r),
                "LOCAL_WORLD_SIZE": str(world_size),
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                "PYTHONPATH": os.pathsep.join([str(PYTHON_DIR), rank_env.get("PYTHONPATH", "")]),
                "TORCH_TEST_RESULT_FILE": str(tmp / f"rank{r}.json"),
                "OMP_NUM_THREADS": "1",
            })
            rank_env.update(env or {})
            log = open(tmp / f"rank{r}.log", "w")
            procs.append(subprocess.Popen([sys.executable, str(WORKER), scenario, *map(str, args)],
                                          env=rank_env, stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True))
            log.close()
        deadline = time.monotonic() + timeout
        timed_out = False
        for p in procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
                break
    finally:
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
    ranks = []
    for r, p in enumerate(procs):
        out_file = tmp / f"rank{r}.json"
        result = json.loads(out_file.read_text()) if out_file.exists() else None
        ranks.append(Rank(r, p.returncode, (tmp / f"rank{r}.log").read_text(), result))
    report = "\n".join(f"--- rank {x.rank} (exit {x.returncode}) ---\n{x.output[-4000:]}" for x in ranks)
    if timed_out:
        raise LaunchError(f"{scenario} {args} with {world_size} ranks did not finish within {timeout} s "
                          f"(killed)\n{report}")
    if not allow_failure:
        bad = [x for x in ranks if x.returncode != 0 or x.result is None]
        if bad:
            raise LaunchError(f"{scenario} {args}: rank(s) {[x.rank for x in bad]} failed\n{report}")
    for f in tmp.iterdir():
        f.unlink()
    tmp.rmdir()
    return ranks
