"""End to end with Debian's Prometheus: a 2-rank choir job with metrics
endpoints, one `choir exporter`, and a Prometheus server on 127.0.0.1
scraping it every second with deploy/prometheus/rules.yml loaded.

PrometheusTest.test_series_arrive_with_labels: collective counters, the
busbw recording rule and host metrics arrive with the right labels.
PrometheusTest.test_every_dashboard_panel_returns_data: each PromQL
expression in deploy/grafana/choir.json parses and returns data.
Every process is stopped by pid at the end, also on failure.
"""
import json
import os
import shutil
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import opstest  # noqa: E402
from opstest import CHOIR, OPS_JOB, SOURCE  # noqa: E402

JOB = "prom-e2e"
PROMETHEUS = shutil.which("prometheus")


class PrometheusTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = opstest.tempdir()
        cls.procs = opstest.Processes()
        try:
            cls._start()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def _start(cls):
        registry = os.path.join(cls.tmp, "registry")
        sysroot = opstest.make_fake_sys(os.path.join(cls.tmp, "sys"))
        cls.exporter = cls.procs.start([CHOIR, "exporter", "--listen", "127.0.0.1:0", "--registry", registry,
                                        "--sys-root", sysroot], stdout=subprocess.PIPE, text=True)
        line = cls.exporter.stdout.readline()
        if "serving http://127.0.0.1:" not in line:
            raise RuntimeError("exporter did not start: " + line)
        exporter_port = int(line.split("127.0.0.1:")[1].split("/")[0])
        cls.job_log = open(os.path.join(cls.tmp, "job.log"), "w")
        cls.job = cls.procs.start([CHOIR, "run", "-n", "2", "--job-id", JOB, "--", OPS_JOB, "--seconds", "45",
                                   "--straggler-rank", "1", "--with-error"],
                                  env={"CHOIR_METRICS_PORT": "auto", "CHOIR_METRICS_REGISTRY": registry},
                                  stdout=cls.job_log, stderr=subprocess.STDOUT)
        rules = os.path.join(cls.tmp, "rules.yml")
        shutil.copy(os.path.join(SOURCE, "deploy", "prometheus", "rules.yml"), rules)
        config = os.path.join(cls.tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "rule_files:\n  - %s\n"
                    "scrape_configs:\n  - job_name: choir-exporter\n    honor_labels: true\n"
                    "    static_configs:\n      - targets: ['127.0.0.1:%d']\n" % (rules, exporter_port))
        prom_port = opstest.free_port()
        cls.base = "http://127.0.0.1:%d" % prom_port
        cls.prom_log = open(os.path.join(cls.tmp, "prometheus.log"), "w")
        cls.prometheus = cls.procs.start([PROMETHEUS, "--config.file", config,
                                          "--storage.tsdb.path", os.path.join(cls.tmp, "data"),
                                          "--web.listen-address", "127.0.0.1:%d" % prom_port],
                                         stdout=cls.prom_log, stderr=subprocess.STDOUT)

        def ready():
            try:
                return opstest.http_get(cls.base + "/-/ready", timeout=1)[0] == 200
            except OSError:
                return False

        if not opstest.poll(ready, 15):
            raise RuntimeError("prometheus did not become ready; see " + cls.prom_log.name)

    @classmethod
    def tearDownClass(cls):
        cls.procs.stop_all()
        for log in ("job_log", "prom_log"):
            if hasattr(cls, log):
                getattr(cls, log).close()
        if os.environ.get("CHOIR_KEEP_TMP"):
            print("kept", cls.tmp)
        else:
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def query(self, expr):
        return opstest.prom_query(self.base, expr)

    def wait_for(self, expr, seconds=20):
        """Polls until the query returns at least one series (the first scrape takes ~6 s)."""
        result = opstest.poll(lambda: self.query(expr).get("data", {}).get("result"), seconds)
        self.assertTrue(result, "no data for %s; job log: %s" % (expr, self.job_log.name))
        return result

    def test_series_arrive_with_labels(self):
        ok = self.wait_for('choir_collectives_total{job="%s", op="allreduce", status="ok", comm="world#0"}' % JOB)
        self.assertEqual(sorted(s["metric"]["rank"] for s in ok), ["0", "1"])
        for s in ok:
            self.assertEqual(s["metric"]["job"], JOB)  # honor_labels kept choir's job label
            self.assertGreater(float(s["value"][1]), 0)
        rates = self.wait_for('rate(choir_collective_bytes_total{job="%s", op="allreduce"}[5s]) > 0' % JOB)
        self.assertEqual(len(rates), 2)
        busbw = self.wait_for('choir:allreduce_busbw_bytes_per_second{job="%s"} > 0' % JOB)
        self.assertEqual(sorted(s["metric"]["rank"] for s in busbw), ["0", "1"])
        # Same-host traffic read from shared slots is counted on the reading side.
        transports = self.wait_for('choir_transport_bytes_received_total{job="%s", transport="shm"} > 0' % JOB)
        self.assertEqual(len(transports), 2)
        errors = self.wait_for('choir_errors_total{job="%s", code="E103"}' % JOB)
        self.assertEqual(errors[0]["metric"]["name"], "NullBuffer")
        late = self.wait_for('choir_late_arrival_seconds_total{job="%s", rank="0", comm="world#0"} > 0' % JOB)
        self.assertEqual(len(late), 1)
        up = self.wait_for('choir_exporter_target_up{job="%s"} == 1' % JOB)
        self.assertEqual(len(up), 2)
        for host in ['choir_host_memory_total_bytes{job="choir-exporter"} > 0',
                     'choir_host_cpu_seconds_total{cpu="0", mode="idle"}',
                     'choir_host_shm_size_bytes > 0',
                     'choir_host_network_mtu_bytes{device="lo"}',
                     'choir_host_temperature_celsius{sensor="thermal_zone0"} == 45']:
            self.wait_for(host)

    def test_every_dashboard_panel_returns_data(self):
        with open(os.path.join(SOURCE, "deploy", "grafana", "choir.json")) as f:
            dash = json.load(f)
        self.wait_for('choir_collectives_total{job="%s"}' % JOB)
        time.sleep(3)  # a few more scrapes so that rate() over the panels' windows has two points
        exprs = [(p["title"], t["expr"]) for p in dash["panels"] for t in p["targets"]]
        self.assertGreaterEqual(len(exprs), 14)
        for title, expr in exprs:
            # Grafana's variables, as Grafana would substitute them.
            q = (expr.replace("$__rate_interval", "10s").replace("$__range", "1m")
                 .replace('"$job"', '".*"').replace('"$instance"', '".*"'))
            self.assertNotIn("$", q, "unsubstituted variable in panel %r" % title)
            parsed = self.query(q)
            self.assertEqual(parsed.get("status"), "success", "panel %r: %s" % (title, parsed))
            data = opstest.poll(lambda: self.query(q).get("data", {}).get("result"), 15)
            self.assertTrue(data, "panel %r returned no data: %s" % (title, q))


if __name__ == "__main__":
    unittest.main()
