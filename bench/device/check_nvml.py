"""Run gputide's NVML path on a real GPU and record what it read: exporter -> Prometheus -> rules -> controller.

    python3 bench/device/check_nvml.py --out DIR [--load-seconds 45] [--fake-nvml]

On a machine with an NVIDIA GPU, the real `prometheus` on PATH and gputide importable (PYTHONPATH=.), this:

1. saves ``nvidia-smi -q`` and logs ``nvidia-smi --query-gpu`` every second as ground truth (nvidia-smi.csv);
2. starts ``gputide exporter --backend nvml`` and a real Prometheus with rules/ scraping it every 5 s;
3. idle, then under a bf16 matrix-product load (PyTorch, if present): saves a scrape each (metrics-*.prom) and
   runs one dry-run controller cycle on what Prometheus holds (``gputide run --dry-run --once``, controller.txt);
4. queries Prometheus for the raw and normalised series and firing alerts (promql.json);
5. probes the backend in-process (probe.json): read() and scrape latency, thresholds, GPM, XID events, the
   power-limit range, and the power-cap path, re-applying each GPU's *current* limit so no setting changes;
6. runs the controller every 5 s (dry-run) through both phases and records its metrics and audit log;
7. with ``--settle-seconds``, waits and queries again: the frozen-readings rule compares with 2 minutes ago.

Nothing here changes the GPU's settings. ``--fake-nvml`` runs the same steps on the in-repo fake NVML (no GPU) so
the script itself is tested before a GPU machine's time is spent on it. Output files are named so that the device
tool brings all eight back (log.txt holds every process's output).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SMI_FIELDS = ("timestamp,name,temperature.gpu,temperature.memory,power.draw,power.limit,enforced.power.limit,"
              "memory.used,memory.free,utilization.gpu,clocks.sm,clocks_event_reasons.active")
FAKE = "from exporters.backends.fake_nvml import FakeDevice, FakeNvml; import sys; " \
       "sys.modules['pynvml'] = FakeNvml([FakeDevice('GPU-fake-0'), FakeDevice('GPU-fake-1', minor=1)]); "
LOAD = """
import sys, time, torch
secs = float(sys.argv[1])
hold = torch.empty(24 << 30, dtype=torch.uint8, device="cuda")   # 24 GiB held, so FB_USED moves
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end, n = time.time() + secs, 0
while time.time() < end:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
    n += 20
print(f"load: {n} bf16 8192^3 products in {secs:.0f} s, {n * 2 * 8192**3 / secs / 1e12:.0f} TFLOP/s", flush=True)
"""
QUERIES = {
    "raw": '{__name__=~"DCGM_.*"}',
    "normalised": '{__name__=~"gpu:.*|gpu_.*:.*"}',
    "alerts": 'ALERTS{alertstate="firing"}',
    "exporter_errors": "gputide_exporter_collect_errors_total",
    "up": "up",
}


class Run:
    def __init__(self, out: Path, fake: bool) -> None:
        self.out, self.fake = out, fake
        self.log = open(out / "log.txt", "a", buffering=1)  # noqa: SIM115 - held for the whole run
        self.procs: list[subprocess.Popen] = []
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                                              os.environ.get("PYTHONPATH")])),
                    "PYTHONUNBUFFERED": "1"}

    def say(self, text: str) -> None:
        print(text, flush=True)
        self.log.write(f"[{time.strftime('%H:%M:%S')}] {text}\n")

    def gputide(self, *args: str) -> list[str]:
        return [sys.executable, "-c", (FAKE if self.fake else "") + "import sys; from balancer.cli import main; "
                "sys.argv = ['gputide'] + sys.argv[1:]; sys.exit(main())", *args]

    def start(self, cmd: list[str], stdout=None) -> subprocess.Popen:
        p = subprocess.Popen(cmd, stdout=stdout or self.log, stderr=self.log, env=self.env, cwd=ROOT)
        self.procs.append(p)
        return p

    def run(self, cmd: list[str], timeout: float = 120) -> str:
        r = subprocess.run(cmd, capture_output=True, text=True, env=self.env, cwd=ROOT, timeout=timeout)
        self.log.write(r.stderr)
        return f"$ {' '.join(cmd[3:] if cmd[1] == '-c' else cmd)}\nrc={r.returncode}\n{r.stdout}"

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()


def http(url: str, timeout: float = 10) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def wait_http(url: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            http(url, 2)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def smi(run: Run) -> None:
    if shutil.which("nvidia-smi") is None:
        run.say("no nvidia-smi: no ground truth recorded")
        return
    (run.out / "nvidia-smi-q.txt").write_text(subprocess.run(["nvidia-smi", "-q"], capture_output=True,
                                                             text=True).stdout)
    fields = SMI_FIELDS
    if subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv"], capture_output=True).returncode:
        fields = fields.replace("clocks_event_reasons", "clocks_throttle_reasons")
    run.start(["nvidia-smi", f"--query-gpu={fields}", "--format=csv", "-lms", "1000"],
              stdout=open(run.out / "nvidia-smi.csv", "w"))  # noqa: SIM115 - the child holds it


def reapply(backend, nvml, k: int, h) -> dict:
    """The power-cap path with no change: the GPU's own management limit set again, then read back."""
    before = nvml.nvmlDeviceGetPowerManagementLimit(h)
    applied = backend.apply_power_caps({backend.identity[k].uuid: before / 1000})
    return {"limit_mw": before, "applied_w": applied, "after_mw": nvml.nvmlDeviceGetPowerManagementLimit(h)}


def probe(fake: bool) -> dict:
    """The backend in-process: what it found, how long a read takes, and the power-cap path without a change."""
    nvml = _nvml(fake)
    from exporters.backends.nvml import NvmlBackend
    from exporters.collector import GpuCollector
    from exporters.exposition import render

    backend = NvmlBackend(nvml)
    reads = []
    for _ in range(50):
        t0 = time.perf_counter()
        r = backend.read()
        reads.append(time.perf_counter() - t0)
    collector = GpuCollector(backend)
    renders = []
    for _ in range(20):
        t0 = time.perf_counter()
        render(collector)
        renders.append(time.perf_counter() - t0)
    gpus = []
    for k, (ident, h) in enumerate(zip(backend.identity, backend.handles, strict=True)):
        info = {"identity": ident.labels(), "gpm": backend._sm.on[k],
                "values": {name: float(v[k]) for name, v in r.values.items()},
                "errors": sorted(f for u, f in r.errors if u == ident.uuid)}
        for name, fn in (("power_limit_range_mw", lambda h=h: nvml.nvmlDeviceGetPowerManagementLimitConstraints(h)),
                         ("default_power_limit_mw", lambda h=h: nvml.nvmlDeviceGetPowerManagementDefaultLimit(h)),
                         ("max_sm_clock_mhz", lambda h=h: nvml.nvmlDeviceGetMaxClockInfo(h, nvml.NVML_CLOCK_SM)),
                         ("memory_total_mib", lambda h=h: nvml.nvmlDeviceGetMemoryInfo(h).total / 2**20),
                         ("architecture", lambda h=h: nvml.nvmlDeviceGetArchitecture(h)),
                         ("driver", lambda: nvml.nvmlSystemGetDriverVersion()),
                         ("mig_mode", lambda h=h: nvml.nvmlDeviceGetMigMode(h)),
                         ("power_cap_reapplied", lambda k=k, h=h: reapply(backend, nvml, k, h))):
            try:
                info[name] = fn()
            except Exception as exc:  # noqa: BLE001 - recorded, not acted on
                info[name] = f"error: {exc!r}"
        gpus.append(info)
    out = {"pynvml": getattr(nvml, "__version__", None), "xid_events": backend._xids.listening.tolist(),
           "unsupported": sorted(map(list, backend._unsupported)),
           "read_ms": {"median": statistics.median(reads) * 1e3, "max": max(reads) * 1e3, "n": len(reads)},
           "render_ms": {"median": statistics.median(renders) * 1e3, "n": len(renders)}, "gpus": gpus}
    backend.close()
    return out


def power_fields(fake: bool, samples: int = 20) -> list[dict]:
    """NVML's power readings side by side, every 0.1 s: the 1 s average and instant fields and the classic getter
    (the exporter publishes the average as DCGM_FI_DEV_POWER_USAGE, as nvidia-smi's power.draw shows it)."""
    nvml = _nvml(fake)
    nvml.nvmlInit()
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    fields = [nvml.NVML_FI_DEV_POWER_AVERAGE, nvml.NVML_FI_DEV_POWER_INSTANT]
    out = []
    for _ in range(samples):
        got = {f"field_{fv.fieldId}": (fv.value.uiVal / 1000 if fv.nvmlReturn == 0 else f"error {fv.nvmlReturn}")
               for fv in nvml.nvmlDeviceGetFieldValues(h, fields)}
        out.append({**got, "nvmlDeviceGetPowerUsage": nvml.nvmlDeviceGetPowerUsage(h) / 1000})
        time.sleep(0.1)
    return out


def _nvml(fake: bool):
    if fake:
        from exporters.backends.fake_nvml import FakeDevice, FakeNvml
        return FakeNvml([FakeDevice("GPU-fake-0")])
    import pynvml
    return pynvml


def query(prom_url: str) -> dict:
    got = {}
    for key, q in QUERIES.items():
        body = json.loads(http(f"{prom_url}/api/v1/query?" + urllib.parse.urlencode({"query": q})))
        got[key] = [{"metric": s["metric"], "value": s["value"][1]} for s in body["data"]["result"]]
    return got


def scrape_timing(url: str, n: int = 30) -> dict:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        http(url)
        times.append(time.perf_counter() - t0)
    return {"median": statistics.median(times) * 1e3, "max": max(times) * 1e3, "n": n}


def phase(run: Run, name: str, exporter: str, prom_url: str) -> dict:
    (run.out / f"metrics-{name}.prom").write_bytes(http(exporter))
    with open(run.out / "controller.txt", "a") as f:
        f.write(f"## {name}\n" + run.run(run.gputide("run", "--prometheus", prom_url, "--dry-run", "--once",
                                                     "--audit-log", str(run.out / f"audit-{name}.jsonl"))))
        audit = run.out / f"audit-{name}.jsonl"
        if audit.exists():
            f.write(f"### audit\n{audit.read_text()}\n")
            audit.unlink()
    return {"promql": query(prom_url), "scrape_ms": scrape_timing(exporter)}


def record_loop(run: Run, loop: subprocess.Popen) -> None:
    """The long-running controller's own metrics (cycles, fail-static, hotspots, actions) and its audit log."""
    lines = [ln for ln in http("http://127.0.0.1:9102/metrics").decode().splitlines()
             if ln.startswith(("gputide_reconcile_total", "gputide_actions_total", "gputide_fail_static ",
                               "gputide_telemetry_staleness", "gputide_hot"))]
    loop.terminate()
    loop.wait(30)
    audit = run.out / "audit-loop.jsonl"
    with open(run.out / "controller.txt", "a") as f:
        f.write(f"## the controller every 5 s through both phases (rc {loop.returncode} after SIGTERM)\n"
                + "\n".join(lines) + "\n### audit\n" + (audit.read_text() if audit.exists() else "") + "\n")
    if audit.exists():
        audit.unlink()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--load-seconds", type=float, default=45.0)
    ap.add_argument("--idle-seconds", type=float, default=20.0)
    ap.add_argument("--settle-seconds", type=float, default=0.0,
                    help="keep everything running this long after the probe, then query the frozen-readings rule and "
                         "the firing alerts again (its 2-minute comparison needs a run that long)")
    ap.add_argument("--fake-nvml", action="store_true")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    run = Run(out, args.fake_nvml)
    sys.path.insert(0, str(ROOT))
    from balancer.telemetry.promserver import PrometheusServer, Target, default_rule_files

    result: dict = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "fake_nvml": args.fake_nvml}
    prom = None
    try:
        smi(run)
        port = 9400
        run.start(run.gputide("exporter", "--backend", "nvml", "--port", str(port), "--listen", "127.0.0.1",
                              "--hostname", "gpu-node-0"))
        exporter = f"http://127.0.0.1:{port}/metrics"
        wait_http(exporter, 60)
        run.say("exporter up")
        prom = PrometheusServer([Target("gputide-exporter", f"127.0.0.1:{port}")], default_rule_files(),
                                scrape_interval="5s").start()
        run.say(f"prometheus up at {prom.url}")
        # the controller as it runs for real (dry-run), for every cycle of both phases: hotspot hysteresis needs
        # several cycles, which the one-cycle runs below cannot show
        loop = run.start(run.gputide("run", "--prometheus", prom.url, "--dry-run", "--interval", "5s",
                                     "--audit-log", str(out / "audit-loop.jsonl"), "--metrics-port", "9102"))
        time.sleep(args.idle_seconds)
        result["idle"] = phase(run, "idle", exporter, prom.url)
        run.say("idle phase recorded")
        try:
            import torch  # noqa: F401 - only to know whether a load can run
            load = run.start([sys.executable, "-c", LOAD, str(args.load_seconds)])
            time.sleep(min(30.0, args.load_seconds * 0.6))
            result["load"] = phase(run, "load", exporter, prom.url)
            result["power_fields_load"] = power_fields(args.fake_nvml)
            run.say("load phase recorded")
            load.wait(args.load_seconds + 60)
        except ImportError:
            run.say("no torch: no load phase")
        result["power_fields_idle"] = power_fields(args.fake_nvml, 5)
        result["probe"] = probe(args.fake_nvml)
        run.say("probe recorded")
        if args.settle_seconds > 0:
            time.sleep(args.settle_seconds)
            result["settled"] = {"promql": query(prom.url), "frozen": json.loads(http(
                f"{prom.url}/api/v1/query?" + urllib.parse.urlencode({"query": "gpu:readings_frozen:bool"})))}
            run.say("settled phase recorded")
        record_loop(run, loop)
    finally:
        (out / "probe.json").write_text(json.dumps(result, indent=1, default=str))
        if prom is not None:
            (out / "log.txt").open("a").write("## prometheus log\n" + prom.log_tail())
            prom.stop()
        run.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
