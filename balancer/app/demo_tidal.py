"""The demo's third stage: tidal capacity shifting on a week of real LLM-serving demand (split from demo.py).

`tidal_stage(demo)` runs the tidal scenario on Alibaba ServeGen m-small (two days with `--quick`) under the
`static`, `reactive` and `gputide` policies and adds their results, the GPUs each held for inference and for
training over the days, and the training progress against `static` to the demo's summary and report;
`calibration_section` then fits rpsPerReplica with `gputide calibrate`'s code on the reactive run's own history.
`SplitProbe` is the simulation's on_step hook that adds the inference / training GPU split to each timeseries row,
keeps the samples the calibration reads and prints progress.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from balancer.app import demo_plots, demo_text

if TYPE_CHECKING:
    from balancer.app.demo import Demo

SERVEGEN_SMALL = Path(__file__).resolve().parents[1] / "data" / "servegen-language" / "m-small"
SERVEGEN_CREDIT = ("<b>Alibaba ServeGen</b> (language, m-small), Apache-2.0: per-client LLM request rates from "
                   "Alibaba Bailian (Model Studio) in 10-minute windows over 14 days, the demand of the tidal and "
                   "forecasting sections; copied unmodified into <code>balancer/data/servegen-language/</code> with "
                   "its SOURCE.txt, LICENSE and README. Xiang et al., <i>ServeGen</i>, arXiv 2505.09999.")


def tidal_stage(demo: Demo) -> None:
    """Stage 3: the tidal scenario on ServeGen m-small under the static, reactive and gputide policies, reported."""
    import pandas as pd

    from balancer.app import scenarios, tidal

    days = 2.0 if demo.quick else 7.0
    demo.stage(3, f"tidal scenario: {days:.0f} days of ServeGen m-small demand, static / reactive / gputide")
    results, frames = {}, {}
    history: dict[str, list] = {}
    services: dict[str, Any] = {}
    for policy in ("static", "reactive", "gputide"):
        t0 = time.perf_counter()
        sim, events, d = scenarios.build("tidal", days=days, trace=str(SERVEGEN_SMALL))
        probe = SplitProbe(policy, sim.time, d, t0, demo.say, record=policy == "reactive")
        summary = scenarios.run_simulation(sim, policy, d, 60.0, demo.out / "tidal" / policy, events=events,
                                           scenario="tidal", on_step=probe, plots=False)
        if probe.record:
            history, services = probe.services, dict(sim.services)
        results[policy] = summary
        frames[policy] = pd.read_csv(demo.out / "tidal" / policy / "timeseries.csv")
        res = results[policy]
        demo.say(f"  {policy:8s} done in {time.perf_counter() - t0:.0f} s: SLO attainment "
                 f"{res['inference']['slo_attainment']:.6f}, training progress "
                 f"{res['training']['progress']:.0f} A100-GPU-hours")
    demo.summary["tidal"] = results
    split = demo_plots.capacity_split(frames, demo.out / "tidal", inference_cols=["inference_gpus"],
                                      training_cols=["training_gpus"])
    static = results["static"]["training"]["progress"]
    for res in results.values():
        res.setdefault("vs_static", {})["training_progress_ratio"] = demo_text.progress_ratio(
            res["training"]["progress"], static)
    r = demo.report
    r.credit(SERVEGEN_CREDIT)
    r.section("3. Tidal capacity: loan GPUs to training at night, reclaim before the morning peak",
              f"{days:.0f} days{demo_text.trace_window(results['static'].get('tidal', {}))} of real LLM-serving "
              f"demand (Alibaba ServeGen, m-small: 43 API clients summed; credited at the end) "
              f"on the 256-GPU demo fleet, scaled so the window's peak needs 60% of the inference pools; elastic "
              f"training fills the rest. <code>static</code> holds each service's peak, <code>reactive</code> "
              f"is an HPA on current utilisation (5-minute stabilisation), <code>gputide</code> moves capacity "
              f"ahead of the tide from a quantile forecast.")
    r.mapping_table(results, [
        ("inference SLO attainment", "inference.slo_attainment"),
        ("SLO-violating requests", "inference.slo_violating_requests"),
        ("training progress (A100-GPU-hours)", "training.progress"),
        ("training progress vs static", "vs_static.training_progress_ratio"),
        ("training preemptions", "training.preemptions"),
        ("inference GPU-hours", "inference.gpu_hours"),
        ("training GPU-hours", "training.gpu_hours"),
        ("mean SM activity", "cluster.sm_active_mean"),
        ("energy (kWh)", "cluster.energy_kwh"),
    ])
    r.text(demo_text.tidal_findings(results))
    r.image(split, demo.out, "GPUs held by inference and by training over the days, per policy")
    calibration_section(demo, history, services, tidal)


def calibration_section(demo: Demo, history: dict[str, list], services: dict, tidal: Any) -> None:
    """`gputide calibrate` on the reactive run's own history (its replica counts move, so loads vary)."""
    import math

    import numpy as np

    from balancer.plan.calibration import calibrate, settled

    fits, rows = {}, []
    for name, samples in sorted(history.items()):
        t, demand, replicas, p99 = np.array(samples, float).T
        spec = services[name]
        keep = settled(t, replicas, spec.warmup_s) & (replicas > 0)
        load = demand[keep] / replicas[keep]
        cal = calibrate(load, p99[keep], spec.slo_latency_s)
        fits[name] = (load, p99[keep], cal)
        mu = spec.rate_on(next(iter(spec.allowed_models)))
        truth = mu - math.log(100.0) / (spec.slo_latency_s - spec.base_latency_s)
        rows.append([name, f"{tidal.safe_rate(mu):.1f}", "-" if cal.rps_per_replica is None else
                     f"{cal.rps_per_replica:.1f}", cal.bound, cal.samples, cal.support, cal.over, f"{truth:.1f}"])
    demo.summary["calibration"] = {n: c.as_dict() for n, (_, _, c) in fits.items()}
    slo = next(iter(services.values())).slo_latency_s
    path = demo_plots.calibration_curves(fits, slo, demo.out / "tidal")
    r = demo.report
    r.section("3b. Calibrating rpsPerReplica from history (gputide calibrate)",
              "The same fit <code>gputide calibrate</code> runs on a cluster's Prometheus, here on the reactive "
              "run's samples (its replica counts move with the load, so loads per replica vary): p99 against "
              "load per serving (placed and warm) replica, samples within a warm-up of a change dropped, isotonic "
              "fit, the largest "
              "load whose fitted p99 stays within the SLO. <em>measured</em>: the data crossed the SLO; "
              "<em>lower</em>: the service never got that slow, so the figure is the highest load seen. The "
              "profiles the scenario uses are stricter (at most 1 in 10,000 requests over the SLO, not p99 "
              "within it); the last column is the simulator's exact p99 limit, mu - ln(100) / (SLO - base).")
    r.table(["service", "profile rpsPerReplica (1e-4 over SLO)", "calibrated (p99 within SLO)", "bound",
             "samples", "within 10%", "over the SLO beyond it", "simulator's exact p99 limit"], rows)
    r.image(path, demo.out, "p99 latency against load per replica, per service, with the fit and the estimate")


class SplitProbe:
    """on_step hook: adds the inference / training GPU split to each timeseries row and prints progress."""

    def __init__(self, policy: str, start: float, days: float, t0: float, say: Callable[[str], None], *,
                 record: bool = False) -> None:
        self.policy, self.start, self.days, self.t0, self.say = policy, start, days, t0, say
        self.last = 0.0
        self.record = record  # keep each service's (time, demand, replicas, p99) for the calibration section
        self.services: dict[str, list[tuple[float, float, float, float]]] = {}

    def __call__(self, sim: Any, row: dict) -> None:
        from balancer.model import WorkloadClass

        if self.record:  # the replicas that serve (placed and warm), as `gputide calibrate` reads them by default
            ready = sim.ready_replicas()
            for name, st in sim.service_status().items():
                self.services.setdefault(name, []).append((sim.time, st.demand_rps, ready[name], st.p99_latency_s))

        used = {"inference": 0.0, "training": 0.0}
        workloads = sim.workloads
        for name, gpus in sim.placements.items():
            w = workloads[name]
            key = "inference" if w.workload_class is WorkloadClass.INFERENCE else "training"
            used[key] += len(gpus) * w.gpu_milli / 1000.0
        row["inference_gpus"], row["training_gpus"] = used["inference"], used["training"]
        done = (sim.time - self.start) / (self.days * 86400.0)
        if done - self.last >= 0.25:
            self.last = done
            self.say(f"  {self.policy:8s} {done:4.0%} of {self.days:.0f} days ({time.perf_counter() - self.t0:.0f} s)")
