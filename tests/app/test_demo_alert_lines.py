"""The live demo's alert lines read as the alert's summary: they were prefixed with the hostname label, which the
GPU alerts' summaries already name ("a100p-02 GPU 3 on a100p-02 ...") and the fleet-wide ones lack (a stray
leading space, and a trailing one where the summary's own optional label was empty)."""

from __future__ import annotations

from balancer.app.demo_live import LiveResult, _record_cycle
from balancer.loop import CycleReport


class Prom:
    def alerts(self):
        return [{"state": "firing", "labels": {"alertname": "GpuHotspot", "hostname": "a100-07"},
                 "annotations": {"summary": "GPU 6 on a100-07 runs hotter than its pool"}},
                {"state": "firing", "labels": {"alertname": "GputideControllerNoLeader"},
                 "annotations": {"summary": "no gputide controller replica holds the Lease "}}]


def test_alert_lines_are_the_summaries():
    said: list[str] = []
    res = LiveResult(prometheus_url="", start_wall=0.0, end_wall=0.0, fault_wall=0.0, fault_node="",
                     outage_wall=(0.0, 0.0))
    _record_cycle(res, Prom(), CycleReport("ok"), 3, said.append)
    assert said == ["  [cycle  3] Prometheus alert firing: GpuHotspot (GPU 6 on a100-07 runs hotter than its pool)",
                    "  [cycle  3] Prometheus alert firing: GputideControllerNoLeader (no gputide controller replica "
                    "holds the Lease)"]
