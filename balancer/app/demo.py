"""`make demo`: the main job, end to end, on an embedded simulated cluster and real traces.

Stages (each prints its progress; all write under OUT):

1. live    - the reconcile loop on the 256-GPU demo fleet through a real Prometheus, with a cooling fault and an
             exporter outage; fleet heatmaps before/after, PNG previews of every Grafana dashboard;
2. hotspot - `gputide simulate --scenario hotspot` for the `none` and `gputide` policies, side by side;
3. tidal   - a week of real LLM-serving demand (Alibaba ServeGen m-small): static / reactive / gputide, and
             `gputide calibrate`'s fit of rpsPerReplica on the reactive run's own history (`demo_tidal.py`);
4. forecast- a rolling-origin backtest of the demand forecasters on the same trace, forecast vs actual;
5. place   - one seed of the FGD placement protocol on the Alibaba v2023 trace (when its files are present);

then `OUT/report.html` ties it together.
"""

from __future__ import annotations

import html
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from balancer.app import demo_plots, demo_text, demo_tidal
from balancer.app.demo_tidal import SERVEGEN_SMALL
from balancer.app.report import Report

ROOT = Path(__file__).resolve().parents[2]
ALIBABA_CREDIT = ("<b>Alibaba GPU cluster trace v2023</b> (cluster-trace-gpu-v2023), for research or study purpose: "
                  "the node and pod lists of the FGD paper, read from <code>../shared/data/alibaba-gpu-v2023/</code> "
                  "or the slice copied into <code>tests/data/alibaba-gpu-v2023/</code> with its SOURCE.txt and licence "
                  "text. Weng et al., <i>Beware of Fragmentation: Scheduling GPU-Sharing Workloads with "
                  "Fragmentation Gradient Descent</i>, USENIX ATC '23.")

HOTSPOT_PANELS = [
    ("temperature_max_c", "hottest GPU (°C)"),
    ("gpus_at_slowdown", "GPUs at slowdown"),
    ("throttled_gpus", "GPUs power-capped"),
    ("p99_over_slo_max", "worst p99 / SLO"),
    ("power_kw", "fleet power (kW)"),
]
HOTSPOT_KEYS = [
    ("GPU-seconds above slowdown", "thermal.gpu_seconds_above_slowdown"),
    ("max temperature (°C)", "thermal.max_temperature_c"),
    ("inference SLO attainment", "inference.slo_attainment"),
    ("training progress (A100-GPU-hours)", "training.progress"),
    ("training preemptions", "training.preemptions"),
    ("energy (kWh)", "cluster.energy_kwh"),
    ("migrations", "actions.migrate"),
    ("power-limit changes", "actions.power_limit"),
    ("node taints", "actions.taint_node"),
    ("actions rejected by safety", "actions.rejected"),
    ("reconcile p50 (ms)", "controller.reconcile_p50_ms"),
    ("reconcile p99 (ms)", "controller.reconcile_p99_ms"),
]


def without_idle_latency(summary: dict[str, Any]) -> dict[str, Any]:
    """`summary` with no reconcile latencies where no reconcile ran (policy none: 0 cycles), so the table shows
    "-" there: the simulation's summary gives 0 ms for an empty list, which reads as an instant controller."""
    ctl = summary.get("controller") or {}
    if ctl.get("cycles"):
        return summary
    return {**summary, "controller": {k: v for k, v in ctl.items() if not k.startswith("reconcile_")}}


class Demo:
    def __init__(self, out: Path, *, quick: bool = False, say: Callable[[str], None] = print) -> None:
        self.out = Path(out)
        self.quick = quick
        self.say = say
        self.report = Report("gputide demo report")
        self.summary: dict[str, Any] = {}

    def stage(self, n: int, title: str) -> None:
        self.say(f"\n[{n}/5] {title}")

    # ---- 1: live, through Prometheus -------------------------------------------------------------------------
    def live(self) -> None:
        from balancer import dashboards_render
        from balancer.app.demo_live import run_live

        self.stage(1, "reconcile loop on the simulated fleet, observed through a real Prometheus")
        out = self.out / "live"
        cycles, outage, minutes = (40, (30, 34), 2.0) if self.quick else (60, (44, 48), 2.0)
        res, prom = run_live(out, cycles=cycles, outage=outage, minutes_per_cycle=minutes, say=self.say,
                             prometheus_keepalive=True)
        assert prom is not None and res.fleet is not None
        try:
            timeline = demo_plots.temperature_timeline(
                prom.url, res.fleet, res.start_wall, res.end_wall, out, fault_wall=res.fault_wall,
                fault_node=res.fault_node, actions=res.actions, outage=res.outage_wall,
                cycle_note=f"one reconcile cycle every {(res.end_wall - res.start_wall) / cycles:.1f} s moved the "
                           f"simulated fleet {minutes:g} minutes")
            self.say("  rendering the Grafana dashboards to PNG from the same Prometheus ...")
            # the run's window and a few seconds of margin: 30 s more left every panel's first third empty
            rendered = dashboards_render.render(prom.url, self.out / "dashboards",
                                                range_s=int(res.end_wall - res.start_wall) + 4, end=res.end_wall)
        finally:
            prom.stop()
        import numpy as np

        slowdown = np.array([g for g in _slowdown(res.fleet)])
        grids = demo_plots.node_grids(res.fleet, {"before the fault": res.temperature_before,
                                                  f"when {res.fault_node} was hottest": res.temperature_peak,
                                                  "end (gputide acted)": res.temperature_after},
                                      out, slowdown=slowdown, highlight=res.fault_node)
        kinds: dict[str, int] = {}
        for a in res.actions:
            kinds[a["kind"]] = kinds.get(a["kind"], 0) + 1
        self.summary["live"] = {"actions": kinds, "fail_static_cycles": len(res.holds),
                                "alerts_fired": sorted(res.alerts_seen), "fault_node": res.fault_node,
                                "gpus_above_slowdown_peak": max(res.hot_gpu_cycles, default=0),
                                "gpus_above_slowdown_end": demo_text.hot_count(res.temperature_after, slowdown)}
        r = self.report
        r.section("1. The reconcile loop, live, through a real Prometheus",
                  f"A 256-GPU simulated fleet (H100, A100 SXM/PCIe, L40S) published by the gputide exporter, scraped "
                  f"by a real Prometheus with <code>rules/</code> loaded; the controller reads only the normalised "
                  f"series. The cooling of <b>{res.fault_node}</b> (its name in red) degrades at the dashed line."
                  + demo_text.outage_sentence(outage[1] - outage[0], res.holds))
        r.image(timeline, self.out, "GPU temperature over the live run, from Prometheus")
        r.image(grids, self.out, f"Node x GPU temperature: before the fault, when {res.fault_node} was hottest, "
                                 f"at the end")
        r.table(["what", "value"], demo_text.live_rows(res, slowdown, kinds))
        rows = [[a["cycle"], a["kind"], a["target"], a["reason"], a["gain"], a["outcome"]] for a in res.actions[:40]]
        if rows:
            r.text("What the controller did and why (first 40 actions; the full audit log is "
                   "<code>live/audit.jsonl</code>):")
            r.table(["cycle", "action", "target", "reason", "expected gain", "outcome"], rows)
        r.section("Dashboards (PNG previews rendered from the same queries Grafana runs)")
        empty = [f"{board}: {', '.join(panels)}" for board, panels in sorted(rendered.empty_panels.items()) if panels]
        if empty:
            r.text("Panels with no data over this run: " + "; ".join(empty) + ".")
        # drawn without their options, as Grafana draws them (the error is Prometheus's text: escaped for the HTML)
        failed = [html.escape(f"{board}: {variable} ({error})")
                  for board, pairs in sorted(rendered.failed_variables.items()) for variable, error in pairs]
        if failed:
            r.text("Variables whose query failed, drawn without their options: " + "; ".join(failed) + ".")
        for png in rendered.written:
            r.image(png, self.out, png.stem)

    # ---- 2: hotspot scenario, none vs gputide ----------------------------------------------------------------
    def hotspot(self) -> None:
        from balancer.app import scenarios

        self.stage(2, "hotspot scenario: none vs gputide (simulated, same loop code)")
        import pandas as pd

        results, frames = {}, {}
        for policy in ("none", "gputide"):
            t0 = time.perf_counter()
            sim, events, days = scenarios.build("hotspot", seed=1, days=1.0 if self.quick else None)
            origin = sim.time
            results[policy] = without_idle_latency(scenarios.run_simulation(
                sim, policy, days, 60.0, self.out / "hotspot" / policy, events=events, scenario="hotspot"))
            frames[policy] = pd.read_csv(self.out / "hotspot" / policy / "timeseries.csv")
            self.say(f"  {policy:8s} {days:.1f} simulated days in {time.perf_counter() - t0:.1f} s: "
                     f"{results[policy]['thermal']['gpu_seconds_above_slowdown']:.0f} GPU-s above slowdown, "
                     f"SLO attainment {results[policy]['inference']['slo_attainment']:.5f}")
        self.summary["hotspot"] = results
        r = self.report
        gpus = results["gputide"].get("gpus")
        fleet = f"a {gpus}-GPU fleet of its own (not section 1's)" if gpus else "a fleet of its own"
        r.section("2. Hotspot scenario: no controller vs gputide",
                  "<code>gputide simulate --scenario hotspot --policy none|gputide</code>: on "
                  f"{fleet}, a node's cooling degrades for six hours under a realistic load; the same planner and "
                  "safety code as the live loop.")
        r.mapping_table(results, HOTSPOT_KEYS)
        png = demo_plots.policy_timeseries(frames, HOTSPOT_PANELS, self.out / "hotspot", name="none_vs_gputide.png",
                                           title="hotspot: no controller vs gputide, same fleet and fault",
                                           origin=origin, events=[(e.time, e.description) for e in events])
        r.image(png, self.out, "hotspot: both policies on the same axes (each policy's own plot is under "
                               "hotspot/POLICY/timeseries.png)")

    # ---- 3: tidal capacity shifting on a real trace (balancer/app/demo_tidal.py) ---------------------------
    def tidal(self) -> None:
        demo_tidal.tidal_stage(self)

    # ---- 4: forecasting, honestly backtested ------------------------------------------------------------------
    def forecast(self) -> None:
        from balancer.forecast.backtest import backtest
        from balancer.forecast.traces import load_demand

        self.stage(4, "rolling-origin backtest of the demand forecasters on ServeGen m-small (14 days, 10-min steps)")
        t0 = time.perf_counter()
        y = load_demand(SERVEGEN_SMALL, "servegen")
        self.say("  fitting and scoring every model at every origin (about a minute; one line when done) ...")
        scores, details = backtest(y, horizons_s=[3600, 4 * 3600], keep_paths=True)
        self.say(f"  {len(scores)} model x horizon scores over {details['origins']} origins in "
                 f"{time.perf_counter() - t0:.0f} s")
        out = self.out / "forecast"
        out.mkdir(parents=True, exist_ok=True)
        pngs = []
        for horizon in ("1h", "4h"):
            path = details["paths"][("auto", horizon)]
            pngs.append(demo_plots.forecast_vs_actual(
                path["actual"], {0.5: path[0.5], 0.9: path[0.9]}, out, name=f"forecast_vs_actual_{horizon}.png",
                title=f"ServeGen m-small: demand vs the auto forecast made {horizon} earlier (p50 line, p50-p90 band)"))
        rows = [[s.model, s.horizon, s.mae, s.mase_seasonal, s.mase_persistence, demo_text.percent(s.coverage_p90)]
                for s in scores]
        self.summary["forecast"] = [s.as_dict() for s in scores]
        for s in scores:
            if s.model == "auto":
                self.say(f"  auto {s.horizon}: MAE {s.mae:.1f} req/s, {s.mase_persistence:.2f} x persistence, "
                         f"{s.mase_seasonal:.2f} x seasonal naive, p90 coverage {s.coverage_p90:.3f}")
        r = self.report
        r.section("4. Forecasting the tide",
                  "Rolling-origin backtest: at every origin each model sees only the past (refitted daily, updated "
                  "every step) and is scored on what came true; intervals are calibrated conformally on earlier "
                  "residuals only. <code>auto</code> is the per-horizon ensemble weighted by recent error. MASE below "
                  "1 beats the baseline.")
        r.credit(demo_tidal.SERVEGEN_CREDIT)
        r.table(["model", "horizon", "MAE (req/s)", "MASE vs seasonal naive", "MASE vs persistence",
                 "p90 coverage"], rows)
        for png, horizon in zip(pngs, ("1h", "4h"), strict=True):
            r.image(png, self.out, f"ServeGen m-small: demand and the auto forecast made {horizon} earlier "
                                   "(p50 line, p50-p90 band)")

    # ---- 5: placement on the Alibaba trace -------------------------------------------------------------------
    def place(self) -> None:
        shared = ROOT.parent / "shared" / "data" / "alibaba-gpu-v2023"
        if (shared / "openb_pod_list_default.csv").exists():
            nodes, pods, what = (shared / "openb_node_list_gpu_node.csv", shared / "openb_pod_list_default.csv",
                                 "the full default trace (1,213 nodes, 6,212 GPUs)")
        else:
            data = ROOT / "tests" / "data" / "alibaba-gpu-v2023"
            nodes, pods, what = (data / "openb_node_list_gpu_node_slice.csv",
                                 data / "openb_pod_list_default_slice.csv",
                                 "the small slice shipped in tests/data (../shared/data is absent)")
        self.stage(5, f"FGD placement protocol, one seed, on {what}")
        out = self.out / "place"
        out.mkdir(parents=True, exist_ok=True)
        curves, at100 = {}, {}
        runs = [("random", []), ("bestfit", []), ("fgd", []), ("gputide", []), ("gputide+defrag", ["--defrag"])]
        if self.quick:
            runs = runs[2:4]
        for label, extra in runs:
            t0 = time.perf_counter()
            policy = label.split("+")[0]
            target = out / f"{label}.json"
            # the CLI in a child process (app sits below cli); its table stays quiet, the demo prints one line
            subprocess.run([sys.executable, "-m", "balancer.cli", "--log-level", "ERROR", "place", "--nodes",
                            str(nodes), "--pods", str(pods), "--policy", policy, "--seeds", "1", "--json",
                            str(target), *extra], check=True, stdout=subprocess.DEVNULL)
            doc = json.loads(target.read_text())
            curves[label] = (doc["levels_pct"], doc["median_unallocated_gpu_pct"])
            at100[label] = doc["unallocated_gpu_pct_at_100"]
            self.say(f"  {label:15s} unallocated GPUs at 100% arrival: {at100[label]:5.2f}% "
                     f"({time.perf_counter() - t0:.0f} s)")
        self.summary["place"] = at100
        png = demo_plots.placement_curves(curves, out)
        r = self.report
        r.credit(ALIBABA_CREDIT)
        r.section("5. Fragmentation-aware placement (the FGD protocol)",
                  f"<code>gputide place</code> on {what}: pods arrive in a shuffled order (seed 42), sampled until "
                  "their GPU requests reach 130% of capacity; lower unallocated GPUs at 100% arrival is better. "
                  "bench/RESULTS.md has every pod list, 10-seed medians and the FGD authors' own figures.")
        r.table(["policy", "unallocated GPUs at 100% arrival (%)"], [[k, v] for k, v in at100.items()])
        r.image(png, self.out, "unallocated GPU share as the cluster fills")

    def finish(self) -> Path:
        (self.out / "summary.json").write_text(json.dumps(self.summary, indent=2, default=str) + "\n")
        path = self.report.write(self.out / "report.html")
        self.say(f"\nreport: {path.resolve()}")
        return path


def _slowdown(fleet):
    from balancer import catalog

    return [catalog.CATALOGUE[g.model].slowdown_temp_c for g in fleet.gpus]


def run_demo(out: Path, *, quick: bool = False, stages: tuple[str, ...] = ("live", "hotspot", "tidal", "forecast",
                                                                           "place")) -> Path:
    import logging
    import warnings

    # the demo narrates what the controller does itself; the audit log under OUT keeps every record
    logging.getLogger("balancer").setLevel(logging.ERROR)
    # MSTL drops its weekly period while a tidal run (2 or 7 days) has under two weeks of history: expected; its
    # two-line warning in the middle of the progress lines read as a failure
    warnings.filterwarnings("ignore", message=r"A period\(s\) is larger than half", category=UserWarning)
    demo = Demo(out, quick=quick)
    demo.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    for name in stages:
        if hasattr(demo, name):
            getattr(demo, name)()
    demo.say(f"\ndemo finished in {time.perf_counter() - t0:.0f} s")
    return demo.finish()
