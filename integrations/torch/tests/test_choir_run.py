"""The backend and the example under `choir run` (env:// rendezvous on MASTER_PORT,
choir's own store on another port)."""
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import ranks

CHOIR = ranks.BUILD_DIR / "bin" / "choir"
EXAMPLE = ranks.REPO / "examples" / "torch" / "train.py"


def choir_run(n, *command, timeout=120, env=None):
    assert CHOIR.exists(), f"{CHOIR} is missing: build the choir CLI (cmake --build {ranks.BUILD_DIR})"
    ranks.check_build()
    run_env = dict(os.environ, PYTHONPATH=str(ranks.PYTHON_DIR), OMP_NUM_THREADS="1", **(env or {}))
    proc = subprocess.Popen([str(CHOIR), "run", "-n", str(n), "--", *map(str, command)], env=run_env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"choir run did not finish within {timeout} s:\n{out[-4000:]}")
    return proc.returncode, out


def test_ddp_parity_under_choir_run():
    with tempfile.TemporaryDirectory() as tmp:
        code, out = choir_run(2, sys.executable, ranks.WORKER, "train", "choir", "adam", 1, 1, 0.002,
                              env={"TORCH_TEST_RESULT_FILE": os.path.join(tmp, "rank{rank}.json")})
        assert code == 0, out
        for r in range(2):
            result = json.loads(Path(tmp, f"rank{r}.json").read_text())
            assert max(result["param_rel_diff"].values()) < 1e-9, result


def test_example_trains_under_choir_run():
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "metrics.json")
        code, out = choir_run(2, sys.executable, EXAMPLE, "--backend", "choir", "--zero", "--steps", 4,
                              "--dim", 32, "--layers", 1, "--seq-len", 16, "--batch-size", 2,
                              "--peak-flops", 1e9, "--json", metrics)
        assert code == 0, out
        assert "[0] step    3 | loss" in out and "summary: choir + ZeRO" in out, out
        report = json.loads(Path(metrics).read_text())
        assert report["summary"]["world_size"] == 2
        losses = [s["loss"] for s in report["steps"]]
        assert losses[-1] < losses[0], losses
        assert all(0 <= s["comm_share"] <= 1 and s["mfu"] > 0 for s in report["steps"]), report["steps"]


def test_benchmark_runs_every_measurement_and_reports_the_floor():
    bench = ranks.REPO / "benchmarks" / "torch_bench.py"
    with tempfile.TemporaryDirectory() as tmp:
        out_json = os.path.join(tmp, "bench.json")
        code, out = choir_run(2, sys.executable, bench, "--rounds", 1, "--latency-iters", 50, "--sizes-mib", 1,
                              "--busbw-iters", 1, "--ddp-dim", 32, "--ddp-layers", 1, "--ddp-steps", 1,
                              "--json", out_json, timeout=180)
        assert code == 0, out
        results = json.loads(Path(out_json).read_text())
        for backend in ("choir", "gloo"):
            assert len(results["latency_us"][backend]) == 1 and results["latency_us"][backend][0] > 0
            assert results["busbw_gibs"]["1"][backend][0] > 0
            assert results["ddp_step_ms"][backend][0] > 0
        assert results["ddp_floor_ms"][0] > 0
        assert "same step, allreduce replaced by a no-op comm hook" in out, out
