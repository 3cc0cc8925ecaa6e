"""pytest plugin: a real local Apache Kafka for integration tests.

pytest loads it by itself wherever aiokprod is installed (a ``pytest11`` entry point named
after this module, so a ``conftest.py`` that still lists it in ``pytest_plugins`` does not
register it twice). Disable it with ``-p no:aiokprod.testing.pytest_plugin``; under
``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1`` list it by hand (``-p aiokprod.testing.pytest_plugin``).

Fixtures:

* ``kafka`` (session): one node, started on first use, shared by every test.
* ``kafka_cluster`` (session): three nodes (RF 3, ``min.insync.replicas=2``), started only
  if a test asks for it. A test that stops or kills a node must start it again.
* ``new_topic`` (function): ``new_topic(partitions=1, rf=1, config=None) -> str`` creates a
  uniquely named topic on ``kafka`` and returns its name.
* ``new_cluster_topic`` (function): the same on ``kafka_cluster``, with ``rf=3`` by default.
* ``kafka_secure`` (session): one node with the SSL, MTLS, SASL_PLAINTEXT and SASL_SSL
  listeners too (``LocalKafka(security=True)``: test CA, PLAIN/SCRAM users, OAUTHBEARER with
  unsecured tokens), started only if a test asks for it. Create topics with
  ``kafka_secure.create_topic``; the PLAINTEXT listener is there for admin and read-back.
* ``kafka_kerberos`` (session): a :class:`~aiokprod.testing.kerberos.KerberosKafka`, one
  secure node whose SASL listeners offer GSSAPI too, with its own MIT KDC on loopback (a
  throwaway realm; needs the Debian krb5 packages), started only if a test asks for it.
  GSSAPI sessions on its SASL_SSL listener last :data:`KERBEROS_REAUTH_MS` (KIP-368).

Tests that use the single broker are marked ``broker``, tests that use the cluster
``cluster`` (``pytest -m "not broker and not cluster"`` runs without Java).

Version matrix: a test (or a fixture parameter) marked ``kafka_version("3.9.2", smoke=True)``
runs against that Kafka release. ``--kafka-versions`` chooses which of them run: ``smoke``
(the default: only those marked ``smoke=True``, the bounded set ``make test`` runs), ``all``
(``make test-versions``), or a comma-separated list of versions. The others are deselected.
:func:`start_or_give_up` starts a broker of any version with the skip/fail rule below.

If Kafka cannot be fetched or started (no Java, no Maven, a broker that dies), the tests
that need it are *skipped* with the reason on a developer machine, and *fail* with the full
error when ``CI=true``: CI must never go green by skipping its integration tests.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator, Mapping
from typing import Protocol

import pytest

from aiokprod.testing.cluster import LocalKafka
from aiokprod.testing.errors import LocalKafkaError
from aiokprod.testing.kerberos import KerberosKafka

#: The shared cluster is where fault tests kill and restart brokers: notice a dead broker in
#: 3 s instead of 9 (it leaves the ISR then), and let a restarted one register sooner.
CLUSTER_CONFIG = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "10000",
}
#: How long a GSSAPI session lasts on ``kafka_kerberos``'s SASL_SSL listener (re-authentication).
KERBEROS_REAUTH_MS = 4000
_BROKER_FIXTURES = frozenset({"kafka", "new_topic", "kafka_secure", "kafka_kerberos"})
_CLUSTER_FIXTURES = frozenset({"kafka_cluster", "new_cluster_topic"})
_UNSAFE_TOPIC_CHARS = re.compile(r"[^a-zA-Z0-9_-]+")


class NewTopic(Protocol):
    """The callable the ``new_topic`` and ``new_cluster_topic`` fixtures return."""

    def __call__(
        self, partitions: int = 1, rf: int | None = None, config: Mapping[str, str] | None = None
    ) -> str:
        """Create a uniquely named topic, wait until it has leaders, return its name."""
        ...


def in_ci() -> bool:
    """Whether the ``CI`` environment variable is ``true`` (any case)."""
    return os.environ.get("CI", "").strip().lower() == "true"


def unique_topic_name(test_name: str) -> str:
    """A topic name derived from a test's name plus a random suffix, always valid for Kafka."""
    stem = _UNSAFE_TOPIC_CHARS.sub("-", test_name).strip("-")[:60] or "test"
    return f"{stem}-{uuid.uuid4().hex[:10]}"


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--kafka-versions``: which tests marked ``kafka_version`` run."""
    parser.addoption(
        "--kafka-versions",
        default="smoke",
        help="version-matrix tests to run: 'smoke' (default: the bounded CI set), 'all', "
        "or a comma-separated list of Kafka versions such as 3.9.2,4.0.2",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Declare the markers, so that the plugin also works without the project's pyproject."""
    config.addinivalue_line("markers", "broker: needs the session-wide local Apache Kafka broker")
    config.addinivalue_line("markers", "cluster: needs the local 3-node Apache Kafka cluster")
    config.addinivalue_line(
        "markers",
        "kafka_version(version, smoke=False): runs against that Kafka release; selected with "
        "--kafka-versions (smoke, all, or a list)",
    )


def version_selected(selection: str, version: str, *, smoke: bool) -> bool:
    """Whether a test marked ``kafka_version(version, smoke=smoke)`` runs under ``selection``."""
    choice = selection.strip()
    if choice == "all":
        return True
    if choice == "smoke":
        return smoke
    return version in {v.strip() for v in choice.split(",") if v.strip()}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test by the Kafka it needs; deselect version-matrix tests not asked for."""
    selection = str(config.getoption("--kafka-versions", default="smoke"))
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if names & _BROKER_FIXTURES:
            item.add_marker(pytest.mark.broker)
        if names & _CLUSTER_FIXTURES:
            item.add_marker(pytest.mark.cluster)
        marker = item.get_closest_marker("kafka_version")
        if marker is not None and not version_selected(
            selection, str(marker.args[0]), smoke=bool(marker.kwargs.get("smoke", False))
        ):
            dropped.append(item)
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def start_or_give_up(
    nodes: int = 1,
    *,
    version: str | None = None,
    broker_config: Mapping[str, str] | None = None,
) -> LocalKafka:
    """Start Kafka, or skip (fail under ``CI=true``) the requesting tests.

    A session fixture that raises is not retried: pytest re-raises the same outcome for every
    later test, so a broken environment costs one start attempt, not one per test.

    Args:
        nodes: cluster size.
        version: Kafka release (default: ``AIOKPROD_KAFKA_VERSION`` or the default version).
        broker_config: extra ``server.properties`` entries for every node.
    """
    try:
        return LocalKafka(nodes=nodes, version=version, broker_config=broker_config).start()
    except LocalKafkaError as exc:
        what = "a local Kafka node" if nodes == 1 else f"a local {nodes}-node Kafka cluster"
        if version is not None:
            what += f" of Apache Kafka {version}"
        message = f"could not start {what}: {exc}"
    # Outside the except block, so the report shows the message, not a chained traceback.
    if in_ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def kafka() -> Iterator[LocalKafka]:
    """One local Kafka node shared by the whole test session."""
    instance = start_or_give_up(1)
    try:
        yield instance
    finally:
        instance.stop()


@pytest.fixture(scope="session")
def kafka_cluster() -> Iterator[LocalKafka]:
    """A local 3-node Kafka cluster shared by the whole test session."""
    instance = start_or_give_up(3, broker_config=CLUSTER_CONFIG)
    try:
        yield instance
    finally:
        instance.stop()


@pytest.fixture(scope="session")
def kafka_secure() -> Iterator[LocalKafka]:
    """One local Kafka node with TLS and SASL listeners, shared by the whole test session."""
    try:
        instance = LocalKafka(security=True).start()
    except LocalKafkaError as exc:
        message = f"could not start a local Kafka node with security listeners: {exc}"
    else:
        try:
            yield instance
        finally:
            instance.stop()
        return
    if in_ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def kafka_kerberos() -> Iterator[KerberosKafka]:
    """A local Kafka node with GSSAPI listeners and its own KDC, shared by the session."""
    reauth = {"listener.name.sasl_ssl.gssapi.connections.max.reauth.ms": str(KERBEROS_REAUTH_MS)}
    try:
        instance = KerberosKafka(broker_config=reauth).start()
    except LocalKafkaError as exc:
        message = f"could not start a local Kafka node with a Kerberos realm: {exc}"
    else:
        try:
            yield instance
        finally:
            instance.stop()
        return
    if in_ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def _topic_factory(kafka: LocalKafka, request: pytest.FixtureRequest, default_rf: int) -> NewTopic:
    def make(
        partitions: int = 1, rf: int | None = None, config: Mapping[str, str] | None = None
    ) -> str:
        name = unique_topic_name(request.node.name)
        kafka.create_topic(name, partitions, rf if rf is not None else default_rf, config)
        return name

    return make


@pytest.fixture
def new_topic(kafka: LocalKafka, request: pytest.FixtureRequest) -> NewTopic:
    """Factory of fresh topics on the single-node ``kafka`` (replication factor 1)."""
    return _topic_factory(kafka, request, default_rf=1)


@pytest.fixture
def new_cluster_topic(kafka_cluster: LocalKafka, request: pytest.FixtureRequest) -> NewTopic:
    """Factory of fresh topics on ``kafka_cluster`` (replication factor 3 by default)."""
    return _topic_factory(kafka_cluster, request, default_rf=3)
