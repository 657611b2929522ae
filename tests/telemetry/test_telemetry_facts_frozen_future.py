"""The secondary scheduler's GPU facts leave out what the snapshot refuses: a GPU whose readings are frozen
(`gpu:readings_frozen:bool` 1: the exporter serves values it stopped reading, with fresh timestamps) and one whose
last sample is stamped further ahead than a scrape interval and 5 s (a clock running ahead: its age is unknown).
`gpu_facts` kept both, so `gputide schedule` scored nodes on a frozen GPU's stale headroom. The query the source
sends is evaluated by promtool on the recorded series, their labels as rules/gputide-recording.yaml records them."""

from __future__ import annotations

import subprocess

import yaml

from balancer.telemetry.prometheus import PrometheusOptions, PrometheusTelemetrySource

# (UUID, last sample minus evaluation time (s), gpu:readings_frozen:bool or None: no series yet, younger than 2m)
GPUS = [("GPU-fresh", -5, 0), ("GPU-frozen", -5, 1), ("GPU-ahead-60s", 60, 0), ("GPU-ahead-10s", 10, 0),
        ("GPU-stale", -120, 0), ("GPU-new", -5, None)]
EVAL_S = 600


class Recording:
    """Answers nothing, keeping the queries asked."""

    def __init__(self):
        self.queries = []

    def custom_query(self, promql):
        self.queries.append(promql)
        return []


def series(name: str, uuid: str, values: str) -> dict:
    labels = f'cluster="c1", hostname="node-a", gpu="{uuid[-1]}", UUID="{uuid}", modelName="NVIDIA H100 80GB HBM3"'
    return {"series": f"{name}{{{labels}}}", "values": values}


def test_frozen_and_future_stamped_gpus_offer_no_headroom(tmp_path, promtool):
    client = Recording()
    PrometheusTelemetrySource(PrometheusOptions(url="http://prom.invalid", scrape_interval_s=15),
                              client=client).gpu_facts()   # limit 60 s, ahead at most 20 s
    query = client.queries[0]
    steps = EVAL_S // 15
    inputs = []
    for uuid, ahead, frozen in GPUS:
        inputs.append(series("gpu:temperature_headroom:celsius", uuid, f"30x{steps}"))
        # at each step t (s) the last sample read t + ahead
        inputs.append(series("gpu:last_sample:timestamp_seconds", uuid, f"{ahead}+15x{steps}"))
        if frozen is not None:
            inputs.append(series("gpu:readings_frozen:bool", uuid, f"{frozen}x{steps}"))
    kept = ["GPU-fresh", "GPU-ahead-10s", "GPU-new"]
    test = {"rule_files": [], "evaluation_interval": "15s", "tests": [{
        "interval": "15s", "input_series": [{"series": s["series"], "values": s["values"]} for s in inputs],
        "promql_expr_test": [{"expr": query, "eval_time": f"{EVAL_S}s", "exp_samples": [
            {"labels": series("gpu:temperature_headroom:celsius", uuid, "")["series"], "value": 30}
            for uuid in kept]}]}]}
    path = tmp_path / "facts_test.yaml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    run = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, check=False)
    assert run.returncode == 0, f"{query}\n{run.stdout}{run.stderr}"
