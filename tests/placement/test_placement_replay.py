"""The FGD-protocol replay and the `gputide place` CLI on a copied slice of the Alibaba v2023 trace."""

from __future__ import annotations

import json

import numpy as np
import pytest

from balancer.cli import main
from balancer.errors import InputError
from balancer.plan.placement.replay import (
    arrival_order,
    arrived_at,
    load_nodes,
    load_pods,
    replay,
    shared_gpu_floor,
)
from balancer.plan.placement.state import PodRequest
from tests.placement.conftest import shared_data


def test_slice_loads_with_every_model(slice_paths):
    nodes, pods = load_nodes(slice_paths[0]), load_pods(slice_paths[1])
    assert nodes.n_nodes == 74 and nodes.total_gpu_milli == 377_000
    assert len(nodes.models) == 7
    assert len(pods) == 300 and pods[0].gpu_milli == 1000


def test_arrival_order_reaches_inflated_capacity_and_depends_on_seed(slice_paths):
    pods = load_pods(slice_paths[1])
    capacity = 377_000
    a, b = arrival_order(pods, capacity, 1.3, 42), arrival_order(pods, capacity, 1.3, 43)
    gpu = np.array([p.total_gpu_milli for p in pods])
    assert gpu[a].sum() >= 1.3 * capacity > gpu[a[:-1]].sum()
    assert not np.array_equal(a, b)
    assert np.array_equal(a, arrival_order(pods, capacity, 1.3, 42))


@pytest.mark.parametrize("policy", ["random", "fgd", "gputide"])
def test_replay_is_deterministic_per_seed_and_allocation_is_monotone(slice_paths, policy):
    nodes, pods = load_nodes(slice_paths[0]), load_pods(slice_paths[1])
    first, again = replay(nodes, pods, policy, 7), replay(nodes, pods, policy, 7)
    assert np.array_equal(first.allocation_pct, again.allocation_pct)
    assert len(first.allocation_pct) == 131
    assert (np.diff(first.allocation_pct) >= 0).all()
    assert first.allocation_pct[100] <= 100.0 and first.allocation_pct[50] <= 50.0 + 1e-9


def test_cli_writes_json_with_median_at_100(slice_paths, tmp_path, capsys):
    out = tmp_path / "r.json"
    args = ["place", "--nodes", str(slice_paths[0]), "--pods", str(slice_paths[1]), "--policy", "fgd"]
    assert main([*args, "--seeds", "2", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    per_seed = [s["unallocated_gpu_pct"][100] for s in data["seeds"]]
    assert data["unallocated_gpu_pct_at_100"] == pytest.approx(float(np.median(per_seed)), abs=1e-3)
    assert [s["seed"] for s in data["seeds"]] == [42, 43]
    assert "| 100 |" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("content", "field"),
    [
        ("sn,cpu_milli,memory_mib,gpu\nn0,1000,1000,1\n", "columns"),
        ("sn,cpu_milli,memory_mib,gpu,model\nn0,-5,1000,1,T4\n", "cpu_milli"),
        ("sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1000,2,\n", "model"),
        ("sn,cpu_milli,memory_mib,gpu,model\nn0,abc,1000,2,T4\n", "cpu_milli"),
    ],
    ids=["missing model column", "negative cpu", "gpu node without model", "non-numeric cpu"],
)
def test_bad_node_files_name_the_field(tmp_path, content, field):
    path = tmp_path / "nodes.csv"
    path.write_text(content)
    with pytest.raises(InputError) as info:
        load_nodes(path)
    assert info.value.field == field and info.value.file == str(path)


@pytest.mark.parametrize(
    ("content", "field"),
    [
        ("name,cpu_milli,memory_mib,num_gpu\np,1,1,1\n", "columns"),
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,1500\n", "gpu_milli"),
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,2,500\n", "gpu_milli"),
        ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,0\n", "gpu_milli"),
    ],
    ids=["missing gpu_milli", "milli above 1000", "multi-GPU pod sharing", "GPU pod with zero milli"],
)
def test_bad_pod_files_name_the_field(tmp_path, content, field):
    path = tmp_path / "pods.csv"
    path.write_text(content)
    with pytest.raises(InputError) as info:
        load_pods(path)
    assert info.value.field == field


def test_cli_bad_input_exits_2(tmp_path, slice_paths):
    assert main(["place", "--nodes", str(tmp_path / "nope.csv"), "--pods", str(slice_paths[1]),
                 "--policy", "fgd"]) == 2  # fmt: skip
    assert (
        main(["place", "--nodes", str(slice_paths[0]), "--pods", str(slice_paths[1]), "--policy", "tetris"])
        == 2
    )


def test_gpu_spec_constraints_from_a_csv_are_respected(tmp_path, slice_paths):
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
                    + "".join(f"p{i},1000,1000,1,500,T4|NOPE\n" for i in range(40))
                    + "".join(f"q{i},1000,1000,1,500,NOPE\n" for i in range(5)))  # fmt: skip
    nodes = load_nodes(slice_paths[0])
    result = replay(nodes, load_pods(pods), "gputide", 1, inflate=1.0)
    t4_milli = int(nodes.gpu_count[nodes.model == nodes.models.index("T4")].sum()) * 1000
    assert (
        result.allocation_pct[-1] * nodes.total_gpu_milli / 100 <= t4_milli + 1
    )  # allocation % is rounded to 4 decimals
    assert result.failed > 0  # the NOPE-only pods fit nowhere


@pytest.mark.slow
def test_full_default_trace_one_seed_matches_the_authors_neighbourhood():
    data = shared_data() / "alibaba-gpu-v2023"
    if not (data / "openb_pod_list_default.csv").exists():
        pytest.skip("shared traces not available")
    nodes = load_nodes(data / "openb_node_list_gpu_node.csv")
    pods = load_pods(data / "openb_pod_list_default.csv")
    fgd = replay(nodes, pods, "fgd", 42).unallocated_pct[100]
    assert 3.0 < fgd < 7.0  # the authors' FGD median is 4.77


def _shares(*milli: int) -> list[PodRequest]:
    return [PodRequest(1000, 1024, 1, m) for m in milli]


@pytest.mark.parametrize(
    ("shares", "floor"),
    [
        ((810, 810, 190, 190), 0),  # the small shares fill both gaps exactly
        ((810, 810, 380), 380),  # 380 fits neither 190 gap
        ((810, 650, 300, 190), 50),  # 300 -> the 350 gap, 190 -> the 190 gap: 50 left
        ((470, 470, 1000), 0),  # no share above half a GPU: nothing is forced idle
    ],
)
def test_shared_gpu_floor_counts_gaps_nothing_smaller_can_fill(shares, floor):
    assert shared_gpu_floor(_shares(*shares)) == floor


def test_shared_gpu_floor_ignores_whole_and_multi_gpu_pods():
    pods = [*_shares(810), PodRequest(1000, 1024, 4, 1000), PodRequest(1000, 1024, 0, 0)]
    assert shared_gpu_floor(pods) == 190


def test_arrived_at_stops_at_the_level(slice_paths):
    nodes, pods = load_nodes(slice_paths[0]), load_pods(slice_paths[1])
    cap = nodes.total_gpu_milli
    order = arrival_order(pods, cap, 1.3, 42)
    arrived = arrived_at(pods, order, cap, 1.0)
    total = sum(p.total_gpu_milli for p in arrived)
    assert total <= cap < total + pods[order[len(arrived)]].total_gpu_milli
