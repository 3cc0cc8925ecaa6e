"""A local Kafka whose SASL listeners offer Kerberos (GSSAPI), against a real MIT KDC.

:class:`KerberosKafka` is a ``LocalKafka(security=True)`` that first starts a throwaway realm
(:class:`~aiokprod.testing.kdc.LocalKdc`: ``krb5kdc`` on a loopback port, principals and
keytabs made for this run), and whose ``SASL_PLAINTEXT`` and ``SASL_SSL`` listeners offer GSSAPI
besides PLAIN, SCRAM and OAUTHBEARER: each listener has its own JAAS ``Krb5LoginModule`` entry
with the broker's keytab, and the JVM is pointed at the realm's krb5.conf (the JVM ignores
``KRB5_CONFIG``). The KDC starts first: the broker logs in while it starts.

Host names, the one thing to know: the brokers advertise ``127.0.0.1`` (as every local Kafka
does), and their principal is ``kafka/localhost@AIOKPROD.TEST``. The Java client reverse-resolves
the address it connects to (``127.0.0.1`` -> ``localhost``) and so asks for that principal by
itself; aiokprod uses the host as written, asks for ``kafka/127.0.0.1`` unless told otherwise,
and is told: :meth:`KerberosKafka.client_options` sets ``sasl_kerberos_domain_name="localhost"``.
That is the same fix a user makes when brokers advertise addresses that are not the hosts of
their principals.

Principals made per run (keytabs with :meth:`KerberosKafka.keytab`): :data:`CLIENT` for
aiokprod, :data:`JAVA_CLIENT` for the Java tools (:meth:`KerberosKafka.run_java_client`), and
whatever a test adds with :meth:`KerberosKafka.add_client`.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Self

from aiokprod.testing.cluster import LocalKafka
from aiokprod.testing.config import render_properties
from aiokprod.testing.errors import LocalKafkaError
from aiokprod.testing.kdc import DEFAULT_REALM, LocalKdc
from aiokprod.testing.security import SASL_MECHANISMS

SERVICE = "kafka"
#: The host part of the brokers' principal: what the Java client makes of 127.0.0.1.
BROKER_HOST = "localhost"
#: aiokprod's principal in the tests, and the Java tools'.
CLIENT = "aiokprod-client"
JAVA_CLIENT = "java-client"
#: The listeners that offer GSSAPI, as Kafka names them in ``listener.name.<name>.``.
GSSAPI_LISTENERS = ("sasl_plaintext", "sasl_ssl")
_CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
_CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"


def krb5_jaas(keytab: Path, principal: str) -> str:
    """A ``sasl.jaas.config`` value logging ``principal`` in with its keytab."""
    return (
        "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true "
        f'useTicketCache=false keyTab="{keytab}" principal="{principal}";'
    )


def gssapi_broker_properties(principal: str, keytab: Path) -> dict[str, str]:
    """``server.properties`` entries that add GSSAPI to the SASL listeners of a secure node."""
    props = {
        "sasl.enabled.mechanisms": ",".join((*SASL_MECHANISMS, "GSSAPI")),
        "sasl.kerberos.service.name": SERVICE,
    }
    for listener in GSSAPI_LISTENERS:
        props[f"listener.name.{listener}.gssapi.sasl.jaas.config"] = krb5_jaas(keytab, principal)
    return props


def java_client_properties(
    protocol: str, principal: str, keytab: Path, ca_file: Path | None = None
) -> dict[str, str]:
    """Properties of a Java client (console tools) authenticating with GSSAPI."""
    props = {
        "security.protocol": protocol,
        "sasl.mechanism": "GSSAPI",
        "sasl.kerberos.service.name": SERVICE,
        "sasl.jaas.config": krb5_jaas(keytab, principal),
    }
    if protocol == "SASL_SSL" and ca_file is not None:
        props["ssl.truststore.type"] = "PEM"
        props["ssl.truststore.location"] = str(ca_file)
    return props


class KerberosKafka(LocalKafka):
    """A secure local Kafka whose SASL listeners offer GSSAPI, with a realm of its own.

    A :class:`LocalKafka` (``security=True`` always) that starts its KDC first and stops it
    last; everything else is LocalKafka's.

    Args:
        nodes: as :class:`LocalKafka` (every node is ``kafka/localhost``).
        realm: the realm's name.
        max_life: the longest ticket of the realm (MIT syntax, ``"1h"``).
        broker_config: more ``server.properties`` entries (``connections.max.reauth.ms``...).
        jvm_args: more JVM flags for the nodes (the krb5.conf flag is added).
        work_dir: parent of the temporary folders (the realm's, Kafka's).
        keep_data: keep both folders after :meth:`stop`.
        **kwargs: the other :class:`LocalKafka` arguments.
    """

    def __init__(
        self,
        nodes: int = 1,
        *,
        realm: str = DEFAULT_REALM,
        max_life: str = "1h",
        broker_config: Mapping[str, str] | None = None,
        jvm_args: Sequence[str] = (),
        work_dir: str | Path | None = None,
        keep_data: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            nodes,
            broker_config=broker_config,
            jvm_args=jvm_args,
            work_dir=work_dir,
            keep_data=keep_data,
            security=True,
            **kwargs,
        )
        self.realm = realm
        self.max_life = max_life
        self._extra_config = dict(self.broker_config)
        self._extra_jvm_args = self.jvm_args
        self._root: Path | None = None
        self._kdc: LocalKdc | None = None

    def start(self) -> Self:
        """Start the KDC, make the principals and keytabs, then start Kafka.

        Raises:
            LocalKafkaError: krb5 or Java missing, or the KDC or a broker did not start.
        """
        if self._kdc is not None and self._kdc.is_running:
            raise LocalKafkaError("this KerberosKafka is already started")
        self._root = Path(tempfile.mkdtemp(prefix="aiokprod-krb5-", dir=self.work_dir))
        try:
            kdc = self._kdc = LocalKdc(self._root / "kdc", self.realm, max_life=self.max_life)
            kdc.start()
            broker = f"{SERVICE}/{BROKER_HOST}"
            broker_keytab = kdc.add_principal(broker)
            for name in (CLIENT, JAVA_CLIENT):
                kdc.add_principal(name)
            gssapi = gssapi_broker_properties(kdc.principal(broker), broker_keytab)
            self.broker_config = {**gssapi, **self._extra_config}
            self.jvm_args = (*self._extra_jvm_args, *kdc.jvm_flags())
            super().start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop Kafka, then the KDC; delete the folders unless ``keep_data``. Safe twice."""
        super().stop()
        if self._kdc is not None:
            self._kdc.stop()
        if self._root is not None and not self.keep_data:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None

    @property
    def kdc(self) -> LocalKdc:
        """The realm's KDC."""
        if self._kdc is None:
            raise LocalKafkaError("this KerberosKafka is not started")
        return self._kdc

    @property
    def root(self) -> Path:
        """The folder of the realm's files (KDC, keytabs, tool properties)."""
        if self._root is None:
            raise LocalKafkaError("this KerberosKafka is not started")
        return self._root

    def keytab(self, name: str = CLIENT) -> Path:
        """The keytab of a principal made for this run."""
        return self.kdc.keytab_path(name)

    def add_client(self, name: str, *, max_life: str | None = None) -> Path:
        """Make one more client principal (``max_life``: its tickets' lifetime); its keytab."""
        return self.kdc.add_principal(name, max_life=max_life)

    def environ(self) -> dict[str, str]:
        """``KRB5_CONFIG`` (this realm) and ``KRB5CCNAME`` (a cache of this run)."""
        return self.kdc.environ()

    def client_options(
        self,
        listener: str = "SASL_PLAINTEXT",
        *,
        principal: str | None = CLIENT,
        keytab: Path | None = None,
    ) -> dict[str, Any]:
        """The aiokprod options for a GSSAPI listener (with :meth:`environ` in the environment).

        Args:
            listener: ``SASL_PLAINTEXT`` or ``SASL_SSL``.
            principal: the client principal (None: the ticket cache's).
            keytab: its keytab (default: the principal's from this run; with
                ``principal=None``, none: the ticket cache is used).
        """
        options: dict[str, Any] = {
            "bootstrap_servers": self.listener_bootstrap(listener),
            "security_protocol": listener,
            "sasl_mechanism": "GSSAPI",
            "sasl_kerberos_domain_name": BROKER_HOST,
        }
        if principal is not None:
            options["sasl_kerberos_principal"] = self.kdc.principal(principal)
            options["sasl_kerberos_keytab"] = str(keytab or self.keytab(principal))
        elif keytab is not None:
            options["sasl_kerberos_keytab"] = str(keytab)
        if listener == "SASL_SSL":
            options["ssl_cafile"] = str(self.ca_file)
        return options

    def run_java_client(
        self,
        main_class: str,
        *args: str,
        listener: str = "SASL_PLAINTEXT",
        principal: str = JAVA_CLIENT,
        timeout: float = 120.0,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a Kafka Java tool that authenticates with GSSAPI on ``listener``.

        The tool gets ``--bootstrap-server`` and ``--command-config`` (a properties file for
        ``principal`` with its keytab) before ``args``, and the realm's krb5.conf.
        """
        props = java_client_properties(
            listener, self.kdc.principal(principal), self.keytab(principal), self.ca_file
        )
        path = self.root / f"{principal}-{listener.lower()}.properties"
        path.write_text(render_properties(props), encoding="utf-8")
        return self.run_java_tool(
            main_class,
            "--bootstrap-server",
            self.listener_bootstrap(listener),
            "--command-config",
            str(path),
            *args,
            timeout=timeout,
            input=input,
            extra_jvm_flags=self.kdc.jvm_flags(),
        )

    def java_produce(
        self, topic: str, values: list[str], *, listener: str = "SASL_PLAINTEXT"
    ) -> subprocess.CompletedProcess[str]:
        """The Java console producer writes ``values`` (one record each) over GSSAPI."""
        return self.run_java_client(
            _CONSOLE_PRODUCER,
            "--topic",
            topic,
            listener=listener,
            input="".join(f"{value}\n" for value in values),
        )

    def java_consume(
        self,
        topic: str,
        count: int,
        *,
        listener: str = "SASL_PLAINTEXT",
        isolation: str = "read_committed",
        timeout_ms: int = 30_000,
    ) -> list[str]:
        """What the Java console consumer reads from ``topic`` (at most ``count`` records)."""
        done = self.run_java_client(
            _CONSOLE_CONSUMER,
            "--topic",
            topic,
            "--from-beginning",
            "--max-messages",
            str(count),
            "--timeout-ms",
            str(timeout_ms),
            "--isolation-level",
            isolation,
            listener=listener,
        )
        return done.stdout.splitlines()


#: ``python -m aiokprod.testing run --kerberos``: the GSSAPI listener's addresses.
GSSAPI_BOOTSTRAP_ENV = "KAFKA_GSSAPI_BOOTSTRAP_SERVERS"


def cli_environ(kafka: LocalKafka) -> dict[str, str]:
    """What the command line prints (``run``) or sets (``exec``) for a Kerberos Kafka.

    The SASL_PLAINTEXT listener (:data:`GSSAPI_BOOTSTRAP_ENV`), the realm's krb5.conf, a ticket
    cache of this run and :data:`CLIENT`'s keytab as the default client keytab, so a program
    needs only ``sasl_mechanism="GSSAPI"`` and ``sasl_kerberos_domain_name="localhost"``.
    Empty for a Kafka without a realm.
    """
    if not isinstance(kafka, KerberosKafka):
        return {}
    return {
        GSSAPI_BOOTSTRAP_ENV: kafka.listener_bootstrap("SASL_PLAINTEXT"),
        **kafka.environ(),
        "KRB5_CLIENT_KTNAME": str(kafka.keytab(CLIENT)),
    }
