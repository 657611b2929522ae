"""Hand-edited YAML that PyYAML reads without a word but that does not say what its author meant: a key written
twice, a typo in a top-level or metadata key, `spec: false`, a document nested past Python's stack. Every gputide
document kind (BalancerPolicy, FleetSpec, ServiceProfiles) refuses them with an InputError naming the file, the
field, the value and what is allowed (balancer.yamlfile), and so does `gputide check` (exit 2)."""

from __future__ import annotations

import pytest
from fuzz_helpers import assert_names_everything

from balancer import config, fleet
from balancer.app.capacity_run import load_profiles
from balancer.errors import InputError

H = "apiVersion: gputide/v1alpha1\n"
POLICY = H + "kind: BalancerPolicy\n"
FLEET = H + "kind: FleetSpec\n"
GROUP = "{namePrefix: a-, count: 2, gpuModel: H100-SXM, gpusPerNode: 8"
SERVICES = H + "kind: ServiceProfiles\n"
LOADERS = {"policy": config.load, "fleet": fleet.load, "services": load_profiles}

CASES = [
    # (loader, text, field)
    pytest.param("policy", POLICY + "spec:\n  safety: {maxActionsPerCycle: 5}\n  safety: {cooldownS: 5}\n", "safety",
                 id="policy: a section written twice keeps only the last"),
    pytest.param("policy", POLICY + "spec:\n  safety:\n    cooldownS: 5\n    cooldownS: 6\n", "cooldownS",
                 id="policy: a field written twice"),
    pytest.param("fleet", FLEET + "spec:\n  nodeGroups:\n    - {namePrefix: a-, count: 2, count: 3, gpuModel: T4, "
                 "gpusPerNode: 1}\n", "count", id="fleet: a group field written twice"),
    pytest.param("services", SERVICES + "services:\n  - {name: a, rpsPerReplica: 3, rpsPerReplica: 4}\n",
                 "rpsPerReplica", id="services: a field written twice"),
    pytest.param("policy", POLICY + "kind: BalancerPolicy\n", "kind", id="policy: a top-level key written twice"),
    pytest.param("policy", "[" * 5000 + "]" * 5000, "(document)", id="policy: nested past Python's stack"),
    pytest.param("services", "{a: " * 3000 + "1" + "}" * 3000, "(document)", id="services: nested mappings"),
    pytest.param("policy", POLICY + "specs:\n  safety: {maxActionsPerCycle: 5}\n", "specs",
                 id="policy: a typo in spec left every field at its default"),
    pytest.param("fleet", FLEET + "spec:\n  nodeGroups:\n    - " + GROUP + "}\nstatus: {}\n", "status",
                 id="fleet: an unknown top-level key"),
    pytest.param("services", SERVICES + "spec: {}\nservices:\n  - {name: a, rpsPerReplica: 3}\n", "spec",
                 id="services: a spec key the kind does not have"),
    pytest.param("policy", POLICY + "metadata: {nmae: prod}\nspec: {}\n", "metadata.nmae",
                 id="policy: a typo in metadata"),
    pytest.param("policy", POLICY + "metadata: [prod]\nspec: {}\n", "metadata", id="policy: metadata a list"),
    pytest.param("policy", POLICY + "metadata: {name: [1, 2]}\n", "metadata.name", id="policy: name a list"),
    pytest.param("fleet", FLEET + "metadata: {name: ''}\nspec:\n  nodeGroups:\n    - " + GROUP + "}\n",
                 "metadata.name", id="fleet: an empty name"),
    pytest.param("services", SERVICES + "metadata: {nmae: x}\nservices:\n  - {name: a, rpsPerReplica: 3}\n",
                 "metadata.nmae", id="services: a typo in metadata"),
    pytest.param("policy", POLICY + "spec: false\n", "spec", id="policy: spec false read as no spec"),
    pytest.param("policy", POLICY + "spec: 0\n", "spec", id="policy: spec 0 read as no spec"),
    pytest.param("policy", POLICY + "spec: {safety: {protectedNamespaces: ['']}}\n",
                 "spec.safety.protectedNamespaces[0]", id="policy: an empty namespace protects nothing"),
    pytest.param("policy", POLICY + "spec: {safety: {protectedNamespaces: [Kube-System]}}\n",
                 "spec.safety.protectedNamespaces[0]", id="policy: a namespace no cluster can have"),
    pytest.param("policy", POLICY + "spec: {safety: {protectedNamespaces: [a, a]}}\n",
                 "spec.safety.protectedNamespaces[1]", id="policy: a namespace listed twice"),
    pytest.param("fleet", FLEET + "spec:\n  nodeGroup: []\n  nodeGroups:\n    - " + GROUP + "}\n", "spec.nodeGroup",
                 id="fleet: a typo next to nodeGroups"),
    pytest.param("fleet", FLEET + "spec:\n  nodeGroups:\n    - {namePrefix: 'GPU node ', count: 2, gpuModel: T4, "
                 "gpusPerNode: 1}\n", "spec.nodeGroups[0].namePrefix", id="fleet: node names Kubernetes refuses"),
    pytest.param("fleet", FLEET + "spec:\n  nodeGroups:\n    - " + GROUP + ", site: ''}\n",
                 "spec.nodeGroups[0].site", id="fleet: an empty site"),
    pytest.param("fleet", FLEET + "spec:\n  nodeGroups:\n    - " + GROUP + ", pool: 'a b'}\n",
                 "spec.nodeGroups[0].pool", id="fleet: a pool no label can hold"),
    pytest.param("fleet", FLEET + "spec:\n  nodeGroups:\n    - " + GROUP + ", cpuMilli: " + "9" * 30 + "}\n",
                 "spec.nodeGroups[0].cpuMilli", id="fleet: CPU beyond int64"),
    pytest.param("fleet", FLEET + "spec:\n  nodeGroups:\n    - " + GROUP + ", memoryMiB: " + "9" * 20 + "}\n",
                 "spec.nodeGroups[0].memoryMiB", id="fleet: memory beyond any node"),
    pytest.param("fleet", FLEET + "spec:\n  nodeGroups:\n    - {namePrefix: a-, count: 2, gpuModel: T4, "
                 "gpusPerNode: 0}\n", "spec.nodeGroups", id="fleet: no GPU at all"),
]


@pytest.mark.parametrize("kind, text, field", CASES)
def test_silently_read_yaml_is_an_input_error(tmp_path, kind, text, field):
    path = tmp_path / f"{kind}.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        LOADERS[kind](path)
    assert_names_everything(info.value, file=str(path), field=field)


def test_a_merge_key_may_still_be_overridden(tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY + "spec:\n  hotspots: &h {marginC: 5, releaseMarginC: 12}\n"
                    "  colocation: {<<: {sloPressure: 0.8}, sloPressure: 0.9}\n")
    assert config.load(path).colocation.slo_pressure == 0.9


def test_the_reported_type_of_a_wrong_fleet_field_reads_well(tmp_path):
    path = tmp_path / "fleet.yaml"
    path.write_text(FLEET + "spec:\n  nodeGroups:\n    - " + GROUP + ", memoryMiB: 1.5}\n")
    with pytest.raises(InputError) as info:
        fleet.load(path)
    assert info.value.allowed == "an integer"


def test_an_error_detail_with_newlines_stays_on_one_line():
    exc = InputError("f.csv", "format", "f.csv", "a CSV\nfile", "Error tokenizing data.\nC error: saw 2\n")
    assert "\n" not in str(exc)
    assert str(exc).endswith("allowed: a CSV file (Error tokenizing data. C error: saw 2)")


SERVICE = SERVICES + "services:\n  - {name: chat, rpsPerReplica: 3"


@pytest.mark.parametrize("text, field", [
    pytest.param(SERVICE.replace("chat", "'a\"} or vector(1)'") + "}\n", "services[0].name",
                 id="a name that rewrites every PromQL query made for it"),
    pytest.param(SERVICE.replace("chat", "Chat Bot") + "}\n", "services[0].name", id="a name no Deployment can have"),
    pytest.param(SERVICE + ", maxReplicas: " + "9" * 30 + "}\n", "services[0].maxReplicas",
                 id="maxReplicas beyond int64"),
    pytest.param(SERVICE + ", gpusPerReplica: 100000}\n", "services[0].gpusPerReplica", id="gpusPerReplica no pod has"),
    pytest.param(SERVICE + ", latencySloSeconds: 100000}\n", "services[0].latencySloSeconds", id="an SLO of centuries"),
    pytest.param(SERVICE + ", maxReplicas: 3, homeReplicas: 10}\n", "services[0].homeReplicas",
                 id="an allotment above maxReplicas"),
])
def test_service_profiles_refuse_values_no_service_can_have(tmp_path, text, field):
    path = tmp_path / "services.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        load_profiles(str(path))
    assert_names_everything(info.value, file=str(path), field=field)
