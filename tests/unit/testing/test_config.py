"""Rendering of node configuration files (no Java, no broker)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from aiokprod.testing.config import (
    NodeAddress,
    broker_log4j1_properties,
    broker_log4j2_properties,
    broker_properties,
    logging_jvm_flag,
    new_cluster_id,
    render_properties,
    tools_log4j1_properties,
    tools_log4j2_properties,
)


def _parse_java_properties(text: str) -> dict[str, str]:
    """Just enough of java.util.Properties.load to check our escaping round-trips."""
    result: dict[str, str] = {}
    for line in text.splitlines():
        if not line or line[0] in "#!":
            continue
        key_chars: list[str] = []
        i = 0
        while i < len(line):
            char = line[i]
            if char == "\\":
                key_chars.append(line[i : i + 2])
                i += 2
                continue
            if char in "=:":
                break
            key_chars.append(char)
            i += 1
        result[_unescape("".join(key_chars))] = _unescape(line[i + 1 :])
    return result


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    specials = {"n": "\n", "r": "\r", "t": "\t", "f": "\f"}
    while i < len(text):
        char = text[i]
        if char != "\\":
            out.append(char)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            out.append(chr(int(text[i + 2 : i + 6], 16)))
            i += 6
        else:
            out.append(specials.get(nxt, nxt))
            i += 2
    # Surrogate pairs written as two \\u escapes become one character again.
    return "".join(out).encode("utf-16", "surrogatepass").decode("utf-16")


def test_render_properties_plain_entries() -> None:
    text = render_properties({"node.id": "1", "log.dirs": "/tmp/x"}, header="hello\nworld")
    assert text == "# hello\n# world\nnode.id=1\nlog.dirs=/tmp/x\n"


@pytest.mark.parametrize(
    "value",
    [
        'org.apache.kafka.common.security.plain.PlainLoginModule required user_a="s=cret";',
        "C:\\kafka\\data",
        "  leading blanks",
        "multi\nline\tvalue",
        "#not a comment",
        "unicode é ü 😀",
        "",
    ],
)
def test_render_properties_round_trips_awkward_values(value: str) -> None:
    text = render_properties({"some.key": value, "weird key=:#": "x"})
    assert text.isascii()
    assert _parse_java_properties(text) == {"some.key": value, "weird key=:#": "x"}


def test_render_properties_rejects_empty_key() -> None:
    with pytest.raises(ValueError, match="empty"):
        render_properties({"": "x"})


def _addresses(count: int) -> list[NodeAddress]:
    return [NodeAddress(i, "127.0.0.1", 10000 + i, 20000 + i) for i in range(1, count + 1)]


def test_single_node_properties() -> None:
    (node,) = _addresses(1)
    props = broker_properties(node, [node], Path("/data/node1"))
    assert props["process.roles"] == "broker,controller"
    assert props["node.id"] == "1"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:20001"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:10001,CONTROLLER://127.0.0.1:20001"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:10001"
    assert props["log.dirs"] == "/data/node1"
    for key in (
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
        "share.coordinator.state.topic.replication.factor",
        "default.replication.factor",
        "min.insync.replicas",
    ):
        assert props[key] == "1", key
    assert "controller.quorum.bootstrap.servers" not in props  # static quorum only


def test_three_node_properties_replicate() -> None:
    nodes = _addresses(3)
    props = broker_properties(nodes[1], nodes, Path("/d/2"))
    assert props["node.id"] == "2"
    assert props["controller.quorum.voters"] == (
        "1@127.0.0.1:20001,2@127.0.0.1:20002,3@127.0.0.1:20003"
    )
    assert props["default.replication.factor"] == "3"
    assert props["offsets.topic.replication.factor"] == "3"
    assert props["min.insync.replicas"] == "2"
    assert props["transaction.state.log.min.isr"] == "2"


def test_overrides_win_and_extend() -> None:
    (node,) = _addresses(1)
    props = broker_properties(
        node,
        [node],
        Path("/d"),
        {"auto.create.topics.enable": "false", "num.partitions": "4"},
    )
    assert props["auto.create.topics.enable"] == "false"
    assert props["num.partitions"] == "4"


def test_node_address_helpers() -> None:
    address = NodeAddress(2, "127.0.0.1", 9092, 9093)
    assert address.bootstrap == "127.0.0.1:9092"
    assert address.voter == "2@127.0.0.1:9093"


def test_cluster_ids_are_valid_kraft_ids() -> None:
    ids = {new_cluster_id() for _ in range(200)}
    assert len(ids) == 200
    for cluster_id in ids:
        assert len(cluster_id) == 22
        assert not cluster_id.startswith("-")
        assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16


def test_log4j_configs() -> None:
    broker = broker_log4j2_properties()
    assert "appender.out.type = Console" in broker
    assert "rootLogger.level = INFO" in broker
    tools = tools_log4j2_properties()
    assert "appender.err.target = SYSTEM_ERR" in tools
    assert "rootLogger.level = WARN" in tools


def test_log4j1_configs_for_kafka_3x() -> None:
    broker = broker_log4j1_properties()
    assert "log4j.rootLogger=INFO, stdout" in broker
    assert "log4j.appender.stdout=org.apache.log4j.ConsoleAppender" in broker
    tools = tools_log4j1_properties()
    assert "log4j.rootLogger=WARN, stderr" in tools
    assert "log4j.appender.stderr.Target=System.err" in tools


def test_logging_flag_per_backend(tmp_path: Path) -> None:
    conf = tmp_path / "log4j.properties"
    assert logging_jvm_flag("log4j2", conf) == f"-Dlog4j2.configurationFile={conf}"
    # Log4j 1 reads a URL, not a path
    assert logging_jvm_flag("reload4j", conf) == f"-Dlog4j.configuration=file://{conf}"


def test_share_coordinator_settings_only_for_kafka_4(tmp_path: Path) -> None:
    node = NodeAddress(1, "127.0.0.1", 9092, 9093)
    with_share = broker_properties(node, [node], tmp_path)
    without = broker_properties(node, [node], tmp_path, share_coordinator=False)
    share_keys = {k for k in with_share if k.startswith("share.coordinator.")}
    assert share_keys == {
        "share.coordinator.state.topic.replication.factor",
        "share.coordinator.state.topic.min.isr",
        "share.coordinator.state.topic.num.partitions",
    }
    assert not any(k.startswith("share.") for k in without)
    assert {k: v for k, v in with_share.items() if k not in share_keys} == without
