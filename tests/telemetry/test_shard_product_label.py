"""A dark GPU node that no reading of this process showed and the fleet file does not list is judged, under a selector
on model or pool, by the GPU model GPU feature discovery's `nvidia.com/gpu.product` label names
(`shard.labelled_model`), where the catalogue knows it. Before, such a node had no model: a new process's dark node,
or one registered again more than `forget_vanished_after_s` after its deletion (its remembered model forgotten), was
no shard's while the unsharded controller held still for it, its power caps lapsing.

A model a reading showed still wins over the label (a node re-imaged while dark stays with the shard that held it, the
safe side), the node list's labels still decide a label criterion (a labelled model never claims a node labelled for
another shard), and a product string the catalogue does not know names no model, as before."""

from __future__ import annotations

import contextlib
from types import MappingProxyType

from balancer import fleet
from balancer.errors import MissingTelemetry
from balancer.inventory import NodeMeta
from balancer.model import Node
from balancer.telemetry.shard import UNLISTED_AFTER_S, ShardedSource, parse_selector
from balancer.telemetry.vanished import GPU_PRESENT
from tests.loop.loop_helpers import snapshot

LABEL = "gputide.io/shard"
H100, A100 = "H100-SXM", "A100-SXM4-80GB"   # catalogue keys
PRODUCT = {H100: "NVIDIA-H100-80GB-HBM3", A100: "NVIDIA-A100-SXM4-80GB"}   # as GPU feature discovery labels them
UNKNOWN = "NVIDIA-X999-1TB"   # a product the catalogue does not know
GPU_PRODUCT = "nvidia.com/gpu.product"


class Labelled:
    """A source whose reading shows the nodes `shown` with the models `read`; its node list (`node_overrides`) lists the
    nodes of `listed` as GPU nodes with that product label (None: none), each labelled for shard a. Its clock (`clock`,
    the shard's too) reads `now`."""

    def __init__(self) -> None:
        self.read = {"a100-0": A100, "h100-0": H100}
        self.shown = ["a100-0", "h100-0"]
        # h100-dark never reported to this process: only its GFD label tells its model
        self.listed: dict[str, str | None] = {"a100-0": PRODUCT[A100], "h100-0": PRODUCT[H100],
                                              "h100-dark": PRODUCT[H100]}
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def node_overrides(self):
        return {n: NodeMeta(labels=MappingProxyType({LABEL: "a", GPU_PRESENT: "true"}
                                                    | ({GPU_PRODUCT: p} if p else {})))
                for n, p in self.listed.items()}

    def snapshot(self):
        snap = snapshot(fleet.build("t", [Node(name=n, gpu_model=self.read[n], gpu_count=2) for n in self.shown]))
        return snap.replace(nodes=tuple(Node(name=n.name, gpu_model=n.gpu_model, gpu_count=n.gpu_count,
                                             labels=MappingProxyType({LABEL: "a"})) for n in snap.nodes))


def nodes_after_a_reading(inner: Labelled, selector: str) -> set[str]:
    """The nodes a shard of `selector`, new, owns after one reading of `inner` (refused or not)."""
    shard = ShardedSource(inner, parse_selector("s", selector))
    with contextlib.suppress(MissingTelemetry):   # no GPU of the reading is the shard's: its nodes are the list's
        shard.snapshot()
    return set(shard.nodes)


def test_a_dark_node_no_reading_showed_is_in_the_shard_of_the_model_its_product_label_names_and_in_no_other():
    inner = Labelled()
    assert nodes_after_a_reading(inner, f"model={H100}") == {"h100-0", "h100-dark"}
    assert nodes_after_a_reading(inner, f"pool={H100}") == {"h100-0", "h100-dark"}   # the pool defaults to the model
    assert nodes_after_a_reading(inner, f"model={A100}") == {"a100-0"}
    assert nodes_after_a_reading(inner, f"pool={A100}") == {"a100-0"}
    # the node list's labels decide a label criterion: a labelled model never claims a node labelled for another shard
    assert nodes_after_a_reading(inner, f"model={H100},{LABEL}=a") == {"h100-0", "h100-dark"}
    assert nodes_after_a_reading(inner, f"model={H100},{LABEL}=b") == set()
    inner.listed["h100-dark"] = None   # no product label: no model, as before
    assert nodes_after_a_reading(inner, f"model={H100}") == {"h100-0"}


def test_a_node_registered_again_dark_after_its_model_was_forgotten_is_its_labelled_models_shard_again():
    """h100-1, read, goes dark and is deleted: its shard drops it and forgets its model once the node list has lacked
    it for the bound. Registered again, still dark, its product label gives it back to the shard of its model."""
    inner = Labelled()
    del inner.listed["h100-dark"]
    inner.read["h100-1"], inner.listed["h100-1"] = H100, PRODUCT[H100]
    inner.shown.append("h100-1")
    shard = ShardedSource(inner, parse_selector("h", f"model={H100}"))
    assert shard.snapshot().n_gpus == 4 and shard.nodes == {"h100-0", "h100-1"}
    inner.shown.remove("h100-1")
    del inner.listed["h100-1"]
    shard.snapshot()
    inner.now += UNLISTED_AFTER_S
    shard.snapshot()
    assert shard.nodes == {"h100-0"} and "h100-1" not in shard._seen
    inner.listed["h100-1"] = PRODUCT[H100]
    shard.snapshot()
    assert shard.nodes == {"h100-0", "h100-1"}


def test_a_model_a_reading_showed_wins_over_the_product_label():
    """h100-dark, claimed by its label, reports once as an A100 (re-imaged, its label not updated yet) and goes dark
    again: it is the A100 shard's, held still for by it, and the H100 shard's no longer, whatever the label says."""
    inner = Labelled()
    h, a = ShardedSource(inner, parse_selector("h", f"model={H100}")), ShardedSource(inner, parse_selector("a",
                                                                                                      f"model={A100}"))
    h.snapshot(), a.snapshot()
    assert h.nodes == {"h100-0", "h100-dark"} and a.nodes == {"a100-0"}
    inner.read["h100-dark"] = A100
    inner.shown.append("h100-dark")
    h.snapshot(), a.snapshot()
    inner.shown.remove("h100-dark")
    h.snapshot(), a.snapshot()
    assert h.nodes == {"h100-0"} and a.nodes == {"a100-0", "h100-dark"}
    # a new process of each, after the reading: the shard of the model it showed (a new term keeps the model too)
    h.new_term(), a.new_term()
    h.snapshot(), a.snapshot()
    assert h.nodes == {"h100-0"} and a.nodes == {"a100-0", "h100-dark"}


def test_a_product_the_catalogue_does_not_know_names_no_model():
    """Not even a selector naming the string itself: a reading's model is a catalogue key or the exporter's modelName
    (`NVIDIA X999 1TB`), which an unknown product string cannot be told equal to."""
    inner = Labelled()
    inner.listed["x999-dark"] = UNKNOWN
    assert nodes_after_a_reading(inner, f"model={H100}") == {"h100-0", "h100-dark"}
    for selector in (f"model={UNKNOWN}", f"pool={UNKNOWN}", "model=NVIDIA X999 1TB", f"model={A100}"):
        assert "x999-dark" not in nodes_after_a_reading(inner, selector), selector


def test_a_time_sliced_or_mig_product_label_names_its_board():
    """GPU feature discovery's `-SHARED` (time-slicing, its default naming) and single-strategy `-MIG-<profile>`
    suffixes: the board is the model a reading would show (audit of 8bb63dec: such a node was no shard's)."""
    for product in (PRODUCT[H100] + "-SHARED", PRODUCT[H100] + "-MIG-1g.10gb", PRODUCT[H100] + "-MIG-INVALID"):
        inner = Labelled()
        inner.listed["h100-dark"] = product
        assert nodes_after_a_reading(inner, f"model={H100}") == {"h100-0", "h100-dark"}, product
        assert "h100-dark" not in nodes_after_a_reading(inner, f"model={A100}"), product
