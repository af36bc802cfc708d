"""Helpers for the operations tests: run choir commands with a deadline and
stop every process the tests start by its pid (never by name).

The binaries come from the environment ctest sets: OPS_CHOIR_BIN (the choir CLI),
OPS_JOB_BIN (tests/ops/ops_job.cc) and OPS_SOURCE_DIR (the repository); none
starts with CHOIR_, which choir would warn about as an unknown setting.
"""
import json
import os
import random
import signal
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request

CHOIR = os.environ.get("OPS_CHOIR_BIN", "choir")
OPS_JOB = os.environ.get("OPS_JOB_BIN", "ops_job")
SOURCE = os.environ.get("OPS_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))


def run(args, env=None, timeout=60, stdin=subprocess.DEVNULL):
    """Runs a command to completion; returns (exit code, stdout, stderr)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    p = subprocess.run(args, env=full_env, stdin=stdin, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


class Processes:
    """Background processes, each stopped by its pid (SIGTERM, then SIGKILL)."""

    def __init__(self):
        self.procs = []

    def start(self, args, env=None, **kwargs):
        full_env = dict(os.environ)
        full_env.update(env or {})
        p = subprocess.Popen(args, env=full_env, stdin=subprocess.DEVNULL, start_new_session=True, **kwargs)
        self.procs.append(p)
        return p

    def stop(self, p, grace=5.0):
        if p.poll() is None:
            # start_new_session: the process leads its own group, so its children go too.
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(timeout=grace)

    def stop_all(self):
        for p in reversed(self.procs):
            self.stop(p)
        self.procs = []


def free_port():
    """A port free a moment ago on 127.0.0.1, outside the kernel's ephemeral
    range: a port in that range can be taken before the program under test
    binds it, as the source port of any connection another test opens."""
    low, high = 10000, 32766
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            first, last = (int(w) for w in f.read().split()[:2])
    except (OSError, ValueError):
        first = last = None
    if first is not None:
        if first > low + 100:
            high = first - 1
        elif last < 65000:
            low, high = last + 1, 65535
        else:
            raise RuntimeError(f"the ephemeral port range {first}-{last} leaves no room for test ports")
    for _ in range(200):
        port = random.randint(low, high)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port on 127.0.0.1 in {low}..{high}")


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


def prom_query(base, expr, timeout=5):
    """Instant query through Prometheus' HTTP API; returns the decoded JSON."""
    url = base + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return json.loads(r.read().decode())
    except urllib.error.HTTPError as e:  # 400 for a query that does not parse
        return json.loads(e.read().decode())


def poll(fn, seconds, interval=0.5):
    """Calls fn until it returns a truthy value or `seconds` pass; returns the last value."""
    end = time.monotonic() + seconds
    value = fn()
    while not value and time.monotonic() < end:
        time.sleep(interval)
        value = fn()
    return value


def make_fake_sys(root):
    """A /sys for the exporter: the real NICs and NUMA nodes plus one thermal
    zone and one hwmon sensor with known values (this VM has no sensors)."""
    os.makedirs(os.path.join(root, "class", "thermal", "thermal_zone0"))
    with open(os.path.join(root, "class", "thermal", "thermal_zone0", "type"), "w") as f:
        f.write("x86_pkg_temp\n")
    with open(os.path.join(root, "class", "thermal", "thermal_zone0", "temp"), "w") as f:
        f.write("45000\n")
    os.makedirs(os.path.join(root, "class", "hwmon", "hwmon0"))
    with open(os.path.join(root, "class", "hwmon", "hwmon0", "name"), "w") as f:
        f.write("coretemp\n")
    with open(os.path.join(root, "class", "hwmon", "hwmon0", "temp1_input"), "w") as f:
        f.write("47000\n")
    os.symlink("/sys/class/net", os.path.join(root, "class", "net"))
    os.symlink("/sys/devices", os.path.join(root, "devices"))
    return root


def tempdir():
    return tempfile.mkdtemp(prefix="choir-ops-")
