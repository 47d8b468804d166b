"""The cluster description, from the YAML files `ray up` takes."""

from pathlib import Path

import pytest

from vifusion.plan.hardware import from_yaml, path

ROOT = Path(__file__).resolve().parents[2]


def test_the_aws_config_gives_each_node_type_its_instance_cores_memory_and_min_workers():
    cluster = from_yaml(ROOT / "deploy" / "cluster.yaml")
    types = {t.name: t for t in cluster.types}
    assert cluster.head == "head"
    assert (types["head"].count, types["head"].cpus) == (1, 4)
    assert (
        types["extract_gpu"].count,
        types["extract_gpu"].gpus,
        types["extract_gpu"].resources,
    ) == (1, 1, {"extract": 1})
    assert (types["shard_mem"].count, types["shard_mem"].cpus, types["shard_mem"].memory_bytes) == (
        2,
        8,
        64 << 30,
    )
    assert [n.name for n in cluster.nodes()] == [
        "head-0",
        "extract_gpu-0",
        "shard_mem-0",
        "shard_mem-1",
    ]


def test_labels_say_what_the_yaml_cannot_links_and_cpu_share(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("""
head_node_type: head
available_node_types:
  head: {resources: {CPU: 2}, node_config: {}}
  far:
    min_workers: 3
    resources: {CPU: 8, GPU: 1}
    labels: {vifusion-uplink: 20mbit, vifusion-rtt-ms: "10", vifusion-cpu-share: "0.5"}
    node_config: {}
""")
    cluster = from_yaml(f)
    far, head = cluster.type("far"), cluster.type("head")
    assert (far.count, far.cores, far.gpus) == (3, 4.0, 1)
    assert path(far, head) == (pytest.approx(20e6 / 8), pytest.approx((0.010 + 0.0005) / 2))
    assert path(head, far)[0] == pytest.approx(20e6 / 8)  # its downlink is as slow
    assert cluster.with_link("head", "100mbit", 2).type("head").uplink == pytest.approx(100e6 / 8)


def test_a_type_whose_cores_nobody_says_is_a_clear_error(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text(
        "head_node_type: h\navailable_node_types:\n  h: {resources: {}, node_config: {InstanceType: x9.huge}}\n"
    )
    with pytest.raises(ValueError, match="how many CPUs"):
        from_yaml(f)
