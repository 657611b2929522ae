"""A contested device goes to the claim that appeared last, remembered per claim and counted in kubelet answers.

First-seen was remembered per pod name and timed by the wall clock: a StatefulSet pod deleted and re-created between
two scrapes (same name) on a finished Job pod's GPU counted as the older claimant and vanished from the GPU, the
finished pod shown holding it; a wall clock stepped back (NTP) between scrapes did the same to any new pod."""

from __future__ import annotations

from exporters.backends.base import GpuIdentity
from exporters.podresources import Allocation, PodAttribution

GPUS = tuple(GpuIdentity(str(i), f"GPU-{i}", f"0000:{i:02x}:00.0", f"nvidia{i}", "NVIDIA H100 80GB HBM3", "node-a")
             for i in range(2))


class Kubelet:
    socket = "fake"

    def __init__(self) -> None:
        self.answer: list[Allocation] = []

    def list(self) -> list[Allocation]:
        return self.answer


def _gpu(pod: str, device: str) -> Allocation:
    return Allocation("ns", pod, "c", "nvidia.com/gpu", device)


def _held(pa: PodAttribution) -> set[tuple[str, str]]:
    return {(w.uuid, w.pod) for w in pa.workloads(GPUS)}


def test_a_statefulset_pod_recreated_on_a_finished_pods_gpu_holds_it():
    kubelet, t = Kubelet(), [100.0]
    pa = PodAttribution(kubelet, clock=lambda: t[0])
    kubelet.answer = [_gpu("web-0", "GPU-0")]
    assert _held(pa) == {("GPU-0", "web-0")}
    t[0] = 115.0
    kubelet.answer = [_gpu("web-0", "GPU-0"), _gpu("job-j", "GPU-1")]
    assert _held(pa) == {("GPU-0", "web-0"), ("GPU-1", "job-j")}
    # job-j completes (still listed); web-0 is deleted and re-created before the next scrape and gets GPU-1
    t[0] = 130.0
    kubelet.answer = [_gpu("job-j", "GPU-1"), _gpu("web-0", "GPU-1")]
    assert _held(pa) == {("GPU-1", "web-0")}
    assert (pa._superseded, pa._contested) == (1, 0)


def test_a_wall_clock_stepped_back_does_not_make_a_new_claim_the_older():
    kubelet, t = Kubelet(), [1000.0]
    pa = PodAttribution(kubelet, clock=lambda: t[0])
    kubelet.answer = [_gpu("job-old", "GPU-0")]
    assert _held(pa) == {("GPU-0", "job-old")}
    t[0] = 955.0   # a scrape interval later, the clock stepped back 60 s
    kubelet.answer = [_gpu("job-old", "GPU-0"), _gpu("job-new", "GPU-0")]
    assert _held(pa) == {("GPU-0", "job-new")}
    assert pa._superseded == 1


def test_claims_first_seen_together_stay_contested_and_an_unanswered_scrape_counts_no_answer():
    import grpc

    class Down(grpc.RpcError):
        pass

    kubelet = Kubelet()
    pa = PodAttribution(kubelet)
    kubelet.answer = [_gpu("a", "GPU-0"), _gpu("b", "GPU-0")]
    assert _held(pa) == {("GPU-0", "a"), ("GPU-0", "b")} and pa._contested == 1
    listed = kubelet.list

    def down() -> list[Allocation]:
        raise Down()

    kubelet.list = down   # type: ignore[method-assign]
    assert _held(pa) == {("GPU-0", "a"), ("GPU-0", "b")}   # the last answer, kept for the grace period
    kubelet.list = listed   # type: ignore[method-assign]
    kubelet.answer = [_gpu("a", "GPU-0"), _gpu("b", "GPU-0"), _gpu("c", "GPU-0")]
    assert _held(pa) == {("GPU-0", "c")} and (pa._superseded, pa._contested) == (2, 0)
