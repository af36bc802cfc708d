"""Importing choir.torch registers the backend once; helpers are reachable."""
import subprocess
import sys

import ranks

SCRIPT = """
import importlib, sys
import torch.distributed as dist
import choir.torch
assert dist.Backend.CHOIR == "CHOIR", dist.Backend.CHOIR
importlib.reload(choir.torch)              # a second registration attempt must not fail
choir.torch._register()
info = choir.torch.error_info("E401")
assert info["name"] == "CollectiveMismatch" and info["fix"], info
assert choir.torch.error_info("PeerLost")["code"] == "E304"
assert choir.torch.error_info("E999") is None
assert choir.torch.error_code(RuntimeError("E304 PeerLost: x")) == "E304"
assert choir.torch.error_code(RuntimeError("boom")) is None
print("ok")
"""


def test_import_twice_and_error_info():
    ranks.check_build()
    env = {"PYTHONPATH": str(ranks.PYTHON_DIR)}
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_backend_name_and_world_of_one():
    launched = ranks.launch("latency", 1, 50, timeout=60)
    assert launched[0].result["p50_us"] > 0
