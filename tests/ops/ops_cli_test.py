"""Black-box tests of `choir exporter`, `choir doctor`, `choir probe` and the
per-process metrics endpoint, including bad input: unknown flags, unreadable
/sys and /proc, a port already in use, a bad setting, a target that dies
mid-scrape. Network: 127.0.0.1 only. Run: python3 ops_cli_test.py [Class]"""
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import opstest  # noqa: E402
from opstest import CHOIR, OPS_JOB, run  # noqa: E402

PROMTOOL = shutil.which("promtool")


def promtool_check(text):
    """promtool's verdict on a metrics document: 0 clean, 3 lint problems, 1 parse error."""
    p = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    return p.returncode, p.stdout + p.stderr


class ExporterCliTest(unittest.TestCase):
    def setUp(self):
        self.tmp = opstest.tempdir()
        self.procs = opstest.Processes()

    def tearDown(self):
        self.procs.stop_all()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_once_passes_promtool(self):
        code, out, err = run([CHOIR, "exporter", "--once", "--registry", self.tmp])
        self.assertEqual(code, 0, err)
        for family in ["choir_host_cpu_seconds_total", "choir_host_memory_total_bytes", "choir_host_shm_free_bytes",
                       "choir_host_network_receive_bytes_total", "choir_host_network_mtu_bytes", "choir_host_numa_nodes",
                       "choir_exporter_device_library"]:
            self.assertIn("# TYPE " + family, out)
        self.assertIn('choir_exporter_device_library{library="nvml"} 0', out)
        self.assertIn("nvml: not found", err)  # said once, and the exporter carries on
        rc, report = promtool_check(out)
        self.assertEqual(rc, 0, report)

    def test_fake_sys_temperatures(self):
        sysroot = opstest.make_fake_sys(os.path.join(self.tmp, "sys"))
        code, out, err = run([CHOIR, "exporter", "--once", "--registry", self.tmp, "--sys-root", sysroot])
        self.assertEqual(code, 0, err)
        self.assertIn('choir_host_temperature_celsius{sensor="thermal_zone0",type="x86_pkg_temp"} 45', out)
        self.assertIn('choir_host_temperature_celsius{sensor="hwmon0/temp1",type="coretemp"} 47', out)

    def test_unreadable_sys_and_proc_are_skipped(self):
        empty = os.path.join(self.tmp, "empty")
        os.makedirs(os.path.join(empty, "class", "thermal", "thermal_zone0", "temp"))  # a directory: unreadable as a file
        code, out, err = run([CHOIR, "exporter", "--once", "--registry", self.tmp, "--sys-root", empty,
                              "--proc-root", empty, "--shm-path", os.path.join(self.tmp, "nope")],
                             env={"CHOIR_LOG_LEVEL": "warn"})
        self.assertEqual(code, 0, err)
        self.assertIn("skipping", err)
        self.assertIn("choir_exporter_host_sources_skipped", out)
        rc, report = promtool_check(out)
        self.assertEqual(rc, 0, report)

    def test_unknown_flag(self):
        code, out, err = run([CHOIR, "exporter", "--bogus"])
        self.assertEqual(code, 2)
        self.assertIn("E602", err)

    def test_bad_listen(self):
        code, out, err = run([CHOIR, "exporter", "--listen", "nonsense"])
        self.assertEqual(code, 2)
        self.assertIn("E602", err)

    def test_port_in_use(self):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", 0))
            s.listen(1)
            port = s.getsockname()[1]
            code, out, err = run([CHOIR, "exporter", "--listen", "127.0.0.1:%d" % port], timeout=20)
        self.assertEqual(code, 1, err)
        self.assertIn("E307", err)

    def test_serves_and_stops_on_sigterm(self):
        p = self.procs.start([CHOIR, "exporter", "--listen", "127.0.0.1:0", "--registry", self.tmp],
                             stdout=subprocess.PIPE, text=True)
        line = p.stdout.readline()
        self.assertIn("serving http://127.0.0.1:", line)
        port = int(line.split("127.0.0.1:")[1].split("/")[0])
        status, body = opstest.http_get("http://127.0.0.1:%d/metrics" % port)
        self.assertEqual(status, 200)
        self.assertIn("choir_exporter_build_info", body)
        self.procs.stop(p)
        self.assertEqual(p.returncode, 0)

    def test_target_dying_mid_scrape(self):
        # A "rank" that answers with half a document and hangs up, registered under our own (live) pid.
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        port = server.getsockname()[1]

        def serve():
            for _ in range(4):
                try:
                    conn, _ = server.accept()
                except OSError:
                    return
                conn.recv(4096)
                body = "# TYPE choir_collectives_total counter\nchoir_collectives_total{job=\"dying\"} 1\nchoir_coll"
                conn.sendall(("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + body).encode())
                conn.close()

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        entry = {"schema": "choir.registry/1", "pid": os.getpid(), "start_time": 0, "job": "dying", "rank": 0,
                 "size": 1, "local_rank": 0, "host": "h", "address": "127.0.0.1", "port": port, "version": "0.1.0"}
        with open(os.path.join(self.tmp, "%d.json" % os.getpid()), "w") as f:
            json.dump(entry, f)
        with open(os.path.join(self.tmp, "999999999.json"), "w") as f:  # a pid that cannot exist: stale
            json.dump(dict(entry, pid=999999999), f)
        with open(os.path.join(self.tmp, "broken.json"), "w") as f:
            f.write("{not json")
        code, out, err = run([CHOIR, "exporter", "--once", "--registry", self.tmp, "--target-timeout", "2"], timeout=30)
        server.close()
        self.assertEqual(code, 0, err)
        self.assertIn('choir_exporter_target_up{job="dying",rank="0",pid="%d"} 0' % os.getpid(), out)
        self.assertIn('choir_exporter_targets{state="stale"} 1', out)
        self.assertIn('choir_exporter_targets{state="unreadable"} 1', out)
        self.assertNotIn('job="dying"} 1', out)  # nothing of the broken document leaks through
        rc, report = promtool_check(out)
        self.assertEqual(rc, 0, report)


class MetricsEndpointTest(unittest.TestCase):
    def setUp(self):
        self.tmp = opstest.tempdir()
        self.registry = os.path.join(self.tmp, "registry")
        self.procs = opstest.Processes()

    def tearDown(self):
        self.procs.stop_all()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_job_registers_serves_and_cleans_up(self):
        env = {"CHOIR_METRICS_PORT": "auto", "CHOIR_METRICS_REGISTRY": self.registry}
        job = self.procs.start([CHOIR, "run", "-n", "2", "--job-id", "endpoint-test", "--", OPS_JOB, "--seconds", "8"],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        def entries():
            if not os.path.isdir(self.registry):
                return []
            return [f for f in os.listdir(self.registry) if f.endswith(".json")]

        self.assertTrue(opstest.poll(lambda: len(entries()) == 2, 20), entries())
        for name in os.listdir(self.registry):
            with open(os.path.join(self.registry, name)) as f:
                e = json.load(f)
            self.assertEqual(e["job"], "endpoint-test")
            self.assertEqual(e["address"], "127.0.0.1")
            status, body = opstest.http_get("http://127.0.0.1:%d/metrics" % e["port"])
            self.assertEqual(status, 200)
            self.assertIn('choir_communicator_info{job="endpoint-test"', body)
            rc, report = promtool_check(body)
            self.assertEqual(rc, 0, report)
        code, out, err = run([CHOIR, "probe", "--job", "endpoint-test", "--registry", self.registry, "--deadline", "10"])
        self.assertEqual(code, 0, out + err)
        self.assertIn("job endpoint-test: 2 processes answering", out)
        out, _ = job.communicate(timeout=60)
        self.assertEqual(job.returncode, 0, out)
        self.assertEqual(entries(), [])  # removed at exit

    def test_bad_port_setting_is_numbered_error(self):
        code, out, err = run([CHOIR, "run", "-n", "2", "--", OPS_JOB, "--seconds", "0"],
                             env={"CHOIR_METRICS_PORT": "eighty", "CHOIR_METRICS_REGISTRY": self.registry}, timeout=60)
        self.assertNotEqual(code, 0)
        self.assertIn("E105", out + err)

    def test_port_in_use_only_warns(self):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", 0))
            s.listen(1)
            port = s.getsockname()[1]
            # One rank: LOCAL_RANK 0 binds exactly `port`.
            code, out, err = run([CHOIR, "run", "-n", "1", "--", OPS_JOB, "--seconds", "0.5"],
                                 env={"CHOIR_METRICS_PORT": str(port), "CHOIR_METRICS_REGISTRY": self.registry}, timeout=60)
        self.assertEqual(code, 0, out + err)
        self.assertIn("E307", out + err)
        self.assertIn("ops_job done", out)


class DoctorCliTest(unittest.TestCase):
    def setUp(self):
        self.tmp = opstest.tempdir()

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_host_report(self):
        code, out, err = run([CHOIR, "doctor"])
        self.assertIn(code, (0, 1), err)
        for title in ["OS and kernel", "CPU and NUMA", "Huge pages", "Swappiness", "Open files limit",
                      "Locked memory limit", "/dev/shm", "Network interfaces", "Clock source", "choir ports",
                      "choir build", "Settings in effect"]:
            self.assertIn(title, out)
        self.assertIn("choir would pick", out)
        self.assertRegex(out, r"summary: \d+ PASS, \d+ WARN, \d+ FAIL")
        for line in out.splitlines():  # every non-PASS check has a cause and a fix
            if line.startswith("WARN") or line.startswith("FAIL"):
                i = out.splitlines().index(line)
                self.assertTrue(out.splitlines()[i + 1].strip().startswith("cause:"), out)
                self.assertTrue(out.splitlines()[i + 2].strip().startswith("fix:"), out)

    def test_json_and_dated_report(self):
        reports = os.path.join(self.tmp, "reports")
        code, out, err = run([CHOIR, "doctor", "--json", "--report", reports])
        self.assertIn(code, (0, 1), err)
        doc = json.loads(out)
        self.assertEqual(doc["schema"], "choir.doctor/1")
        self.assertEqual(set(doc), {"schema", "host", "time", "summary", "checks", "facts"})
        for c in doc["checks"]:
            self.assertIn(c["status"], ("PASS", "WARN", "FAIL"))
            if c["status"] != "PASS":
                self.assertTrue(c["cause"] and c["fix"])
        files = os.listdir(reports)
        self.assertEqual(len(files), 1)
        self.assertRegex(files[0], r"^choir-doctor-.+-\d{8}T\d{6}Z\.json$")
        # A saved report can be judged again later.
        code2, out2, err2 = run([CHOIR, "doctor", "--facts", os.path.join(reports, files[0])])
        self.assertIn(code2, (0, 1), err2)
        self.assertIn("summary:", out2)

    def test_fake_facts_fail_with_cause_and_fix(self):
        facts = {"hostname": "n7", "kernel": "6.1.0", "os": "Debian", "swappiness": 60,
                 "shm": {"path": "/dev/shm", "size_bytes": 64 << 20, "free_bytes": 60 << 20},
                 "limits": {"nofile": {"soft": 1024, "hard": 4096}, "memlock": {"soft": -1, "hard": -1}},
                 "settings": {"user_set": {}, "invalid": [{"name": "CHOIR_TIMEOUT", "error": "not a duration"}],
                              "unknown_environment": []}}
        path = os.path.join(self.tmp, "facts.json")
        with open(path, "w") as f:
            json.dump(facts, f)
        code, out, err = run([CHOIR, "doctor", "--facts", path])
        self.assertEqual(code, 1)
        self.assertIn("E603 HostCheckFailed", err)
        self.assertRegex(out, r"FAIL  /dev/shm +60 MiB free of 64 MiB")
        self.assertIn("docker --shm-size", out)
        self.assertRegex(out, r"WARN  Swappiness")
        self.assertRegex(out, r"WARN  Open files limit")
        self.assertRegex(out, r"FAIL  Settings in effect")
        self.assertRegex(out, r"WARN  Huge pages +/proc/meminfo could not be read")

    def test_bad_input(self):
        code, out, err = run([CHOIR, "doctor", "--frobnicate"])
        self.assertEqual(code, 2)
        self.assertIn("E602", err)
        bad = os.path.join(self.tmp, "bad.json")
        with open(bad, "w") as f:
            f.write("[1, 2")
        code, out, err = run([CHOIR, "doctor", "--facts", bad])
        self.assertEqual(code, 2)
        self.assertIn("E602", err)
        code, out, err = run([CHOIR, "doctor", "--facts", os.path.join(self.tmp, "missing.json")])
        self.assertEqual(code, 2)
        code, out, err = run([CHOIR, "doctor", "--port", "70000"])
        self.assertEqual(code, 2)
        code, out, err = run([CHOIR, "doctor", "--report", "/proc/choir-cannot-write-here"])
        self.assertEqual(code, 1)
        self.assertIn("E501", err)

    def test_unreadable_root(self):
        # A root that holds nothing: every fact is reported unreadable.
        empty = os.path.join(self.tmp, "empty-root")
        os.mkdir(empty)
        code, out, err = run([CHOIR, "doctor", "--root", empty])
        self.assertIn(code, (0, 1), err)
        self.assertIn("could not be read", out)
        # A root that is not a directory is a mistyped flag.
        for root, why in [(os.path.join(self.tmp, "nothing-here"), "No such file or directory"),
                          ("/dev/null", "not a directory"), ("", "No such file or directory")]:
            code, out, err = run([CHOIR, "doctor", "--root", root])
            self.assertEqual(code, 2, err)
            self.assertIn("E602", err)
            self.assertIn("--root %s: %s" % (root, why), err)

    def test_port_in_use_names_holder(self):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", 0))
            s.listen(1)
            port = s.getsockname()[1]
            code, out, err = run([CHOIR, "doctor", "--port", str(port)])
        self.assertIn("%d IN USE by pid %d" % (port, os.getpid()), out)
        self.assertRegex(out, r"WARN  choir ports")

    def test_explain_new_codes(self):
        for code_name in ["E603", "E604", "E605"]:
            code, out, err = run([CHOIR, "doctor", "explain", code_name])
            self.assertEqual(code, 0, err)
            self.assertIn("Fix:", out)


class DoctorClusterTest(unittest.TestCase):
    """Several host ids on loopback (the namespace test bed does not exist yet)."""

    SCRIPT = 'if [ "$RANK" = 2 ]; then export CHOIR_SPIN_US=7 NCCL_IB_DISABLE=1; fi; ' \
             'CHOIR_HOST_ID=host$RANK exec "$0" doctor --cluster --bytes 256K --iters 2 "$@"'

    def test_differences_are_listed_with_hosts(self):
        code, out, err = run([CHOIR, "run", "-n", "3", "--", "sh", "-c", self.SCRIPT, CHOIR], timeout=120)
        self.assertNotEqual(code, 0, out)
        self.assertIn("choir doctor --cluster: 3 hosts: host0,host1,host2", out)
        self.assertIn("DIFF setting.CHOIR_SPIN_US: '2' on host0,host1 | '7' on host2", out)
        self.assertIn("DIFF env.NCCL_IB_DISABLE: '<unset>' on host0,host1 | '1' on host2", out)
        self.assertIn("host0 <-> host2: reachable", out)
        self.assertIn("host1 <-> host2: reachable", out)
        self.assertIn("E604 ClusterMismatch", out + err)

    def test_equal_hosts_pass_and_json(self):
        script = 'CHOIR_HOST_ID=node$RANK exec "$0" doctor --cluster --bytes 64K --iters 2 --json'
        code, out, err = run([CHOIR, "run", "-n", "2", "--", "sh", "-c", script, CHOIR], timeout=120)
        self.assertEqual(code, 0, out + err)
        body = "\n".join(l[4:] for l in out.splitlines() if l.startswith("[0] "))
        doc = json.loads(body)
        self.assertEqual(doc["schema"], "choir.doctor.cluster/1")
        self.assertEqual(doc["differences"], [])
        self.assertEqual(len(doc["links"]), 1)
        self.assertGreater(doc["links"][0]["bandwidth_bytes_per_second"], 0)

    def test_ranks_of_one_host_get_labels_of_their_own(self):
        script = 'CHOIR_HOST_ID=same exec "$0" doctor --cluster --bytes 64K --iters 2'
        code, out, err = run([CHOIR, "run", "-n", "2", "--", "sh", "-c", script, CHOIR], timeout=120)
        self.assertEqual(code, 0, out + err)
        self.assertIn("choir doctor --cluster: 2 hosts: same#0,same#1", out)
        self.assertIn("same#0 <-> same#1: reachable", out)

    def test_outside_a_job(self):
        code, out, err = run([CHOIR, "doctor", "--cluster"], env={"WORLD_SIZE": "", "RANK": ""}, timeout=30)
        self.assertEqual(code, 1)
        self.assertIn("choir run", err)

    def test_bad_flags(self):
        code, out, err = run([CHOIR, "doctor", "--cluster", "--bytes", "huge"])
        self.assertEqual(code, 2)
        self.assertIn("E602", err)


class ProbeTest(unittest.TestCase):
    def test_healthy(self):
        code, out, err = run([CHOIR, "probe", "--deadline", "20"], timeout=60)
        self.assertEqual(code, 0, err)
        self.assertRegex(out, r"^choir probe: OK shm,tcp allreduce\+broadcast, 2 ranks, 64 KiB in [\d.]+ ms\n$")

    def test_each_transport(self):
        for t in ["shm", "tcp"]:
            code, out, err = run([CHOIR, "probe", "--transport", t, "--bytes", "1M"], timeout=60)
            self.assertEqual(code, 0, err)

    def test_unhealthy_is_one_line(self):
        code, out, err = run([CHOIR, "probe", "--job", "no-such-job", "--registry", "/nonexistent-dir"], timeout=60)
        self.assertEqual(code, 1)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn("E605 ProbeFailed", err)

    def test_deadline(self):
        code, out, err = run([CHOIR, "probe", "--deadline", "0.001", "--bytes", "16M"], timeout=60)
        self.assertEqual(code, 1)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertRegex(err, r"^choir probe: E\d{3} ")

    def test_bad_flags(self):
        for args in (["--transport", "rdma"], ["--deadline", "-1"], ["--bytes", "0"], ["--what"]):
            code, out, err = run([CHOIR, "probe"] + args)
            self.assertEqual(code, 2, args)
            self.assertIn("E602", err)


class DeployFilesTest(unittest.TestCase):
    def test_kubernetes_examples_parse(self):
        import yaml
        d = os.path.join(opstest.SOURCE, "deploy", "kubernetes")
        pod = yaml.safe_load(open(os.path.join(d, "training-pod-with-probe.yaml")))
        probe = pod["spec"]["containers"][0]["livenessProbe"]["exec"]["command"]
        self.assertEqual(probe[:2], ["choir", "probe"])
        # The flags in the example must be ones `choir probe` accepts.
        code, out, err = run([CHOIR] + probe[1:] + ["--help"])
        self.assertEqual(code, 0, err)
        ds = yaml.safe_load(open(os.path.join(d, "exporter-daemonset.yaml")))
        cmd = ds["spec"]["template"]["spec"]["containers"][0]["command"]
        code, out, err = run([CHOIR] + cmd[1:] + ["--help"])
        self.assertEqual(code, 0, err)


if __name__ == "__main__":
    unittest.main()
