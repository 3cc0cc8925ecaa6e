"""A throwaway MIT Kerberos realm on loopback: one ``krb5kdc`` process and its files.

Used by :mod:`aiokprod.testing.kerberos` to run Kafka's GSSAPI listeners against a real KDC
(no mock). Everything lives in one folder made per run::

    kdc.conf        the KDC's profile (KRB5_KDC_PROFILE): realm, database, ports, log
    krb5.conf       the clients' profile (KRB5_CONFIG; the JVM's -Djava.security.krb5.conf)
    principal*      the realm's database, created with ``kdb5_util create -s``
    stash           its master key, so the KDC starts without a prompt
    kdc.log         the KDC's log: one line per AS_REQ/TGS_REQ, with the principals
    *.keytab        keytabs extracted with ``kadmin.local ktadd -norandkey``

The KDC answers on one loopback port for TCP and UDP (clients use TCP:
``udp_preference_limit = 1``) and is started with ``krb5kdc -n`` in the foreground, tracked
by :mod:`aiokprod.testing.reaper` like the brokers. The client profile turns off every DNS
guess (``rdns = false``, ``dns_canonicalize_hostname = false``, no DNS realm or KDC lookup)
and maps ``localhost`` to the realm.

Needs the Debian packages ``krb5-kdc``, ``krb5-admin-server`` and ``krb5-user`` (the
commands ``krb5kdc``, ``kdb5_util``, ``kadmin.local``, ``kinit``, ``klist``).
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from aiokprod.testing import reaper
from aiokprod.testing.errors import LocalKafkaError, error_with_output
from aiokprod.testing.ports import LOOPBACK, port_accepts

DEFAULT_REALM = "AIOKPROD.TEST"
#: The MIT commands a realm needs, and the Debian packages that bring them.
KRB5_COMMANDS: Mapping[str, str] = {
    "krb5kdc": "krb5-kdc",
    "kdb5_util": "krb5-kdc",
    "kadmin.local": "krb5-admin-server",
    "kinit": "krb5-user",
    "klist": "krb5-user",
}
_SBIN = ("/usr/sbin", "/sbin")
_COMMAND_TIMEOUT = 60.0
_START_TIMEOUT = 30.0
#: kadmin.local exits 0 even when its command failed; these words mark its error lines.
_KADMIN_ERROR = re.compile(r"\b(while|error|failed|unknown|not found|invalid)\b", re.IGNORECASE)


def find_krb5_command(name: str) -> str | None:
    """The path of an MIT Kerberos command (``PATH``, then ``/usr/sbin``), or None."""
    found = shutil.which(name)
    if found is not None:
        return found
    for folder in _SBIN:
        candidate = Path(folder) / name
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def missing_krb5_commands() -> list[str]:
    """The MIT Kerberos commands that are not installed (empty when a realm can be made)."""
    return [name for name in KRB5_COMMANDS if find_krb5_command(name) is None]


def require_krb5() -> None:
    """Raise :class:`LocalKafkaError` naming the packages to install, if any are missing."""
    missing = missing_krb5_commands()
    if missing:
        packages = sorted({KRB5_COMMANDS[name] for name in missing})
        raise LocalKafkaError(
            f"an MIT Kerberos KDC needs {', '.join(missing)} (Debian/Ubuntu: apt-get install "
            f"{' '.join(packages)})"
        )


def find_libfaketime() -> str:
    """The path of libfaketime (Debian package ``faketime``), to run a KDC off the clock.

    Raises:
        LocalKafkaError: it is not installed.
    """
    for pattern in ("/usr/lib/*/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1"):
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    raise LocalKafkaError("a KDC off the real clock needs libfaketime (apt-get install faketime)")


def pick_tcp_udp_port(host: str = LOOPBACK, attempts: int = 50) -> int:
    """A port free for both TCP and UDP on ``host`` right now (a KDC listens on both)."""
    for _ in range(attempts):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
            tcp.bind((host, 0))
            port = int(tcp.getsockname()[1])
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                try:
                    udp.bind((host, port))
                except OSError:
                    continue
                return port
    raise LocalKafkaError(f"no port free for both TCP and UDP on {host}")


def kdc_conf(realm: str, root: Path, port: int, max_life: str, database: Path | None = None) -> str:
    """The KDC's profile: one realm on one loopback port, its log in ``root``.

    The database is in ``database`` (default ``root``).
    """
    db = database or root
    return f"""[kdcdefaults]
    kdc_listen = {LOOPBACK}:{port}
    kdc_tcp_listen = {LOOPBACK}:{port}

[realms]
    {realm} = {{
        database_name = {db / "principal"}
        key_stash_file = {db / "stash"}
        acl_file = {db / "kadm5.acl"}
        max_life = {max_life}
        max_renewable_life = 0
        supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal
        default_principal_flags = +preauth
    }}

[logging]
    kdc = FILE:{root / "kdc.log"}
"""


def krb5_conf(realm: str, port: int, *, kdc_timesync: bool = True) -> str:
    """The clients' profile: the realm on ``127.0.0.1:port`` and no DNS guesses at all."""
    return f"""[libdefaults]
    default_realm = {realm}
    dns_lookup_realm = false
    dns_lookup_kdc = false
    rdns = false
    dns_canonicalize_hostname = false
    udp_preference_limit = 1
    kdc_timesync = {1 if kdc_timesync else 0}
    forwardable = false
    default_tkt_enctypes = aes256-cts-hmac-sha1-96 aes128-cts-hmac-sha1-96
    default_tgs_enctypes = aes256-cts-hmac-sha1-96 aes128-cts-hmac-sha1-96

[realms]
    {realm} = {{
        kdc = {LOOPBACK}:{port}
    }}

[domain_realm]
    localhost = {realm}
"""


class LocalKdc:
    """An MIT Kerberos realm of its own, served by ``krb5kdc`` on a loopback port.

    Args:
        root: the folder for every file of the realm (created; left for the caller to delete).
        realm: the realm's name.
        max_life: the longest ticket the realm issues (MIT duration syntax, e.g. ``"1h"``);
            principals can have shorter ones (:meth:`add_principal`).
        time_offset: run the KDC this far off the real clock (``"+1h"``, through
            libfaketime), for clock-skew tests; None: the real clock.
        database_of: serve the database of this other KDC (already started once) instead
            of creating one: a second KDC of the same realm, e.g. off the clock.
        kdc_timesync: the clients' ``kdc_timesync`` (MIT's default, on, makes a client
            adopt the KDC's clock; off, a clock difference is an error).
    """

    def __init__(
        self,
        root: Path,
        realm: str = DEFAULT_REALM,
        *,
        max_life: str = "1h",
        time_offset: str | None = None,
        database_of: LocalKdc | None = None,
        kdc_timesync: bool = True,
    ) -> None:
        self.root = root
        self.realm = realm
        self.max_life = max_life
        self.time_offset = time_offset
        self.port: int | None = None
        self.kdc_timesync = kdc_timesync
        self._process: subprocess.Popen[bytes] | None = None
        self._database = database_of.root if database_of is not None else root
        self._created = database_of is not None

    # --- files ------------------------------------------------------------------------------

    @property
    def kdc_conf_path(self) -> Path:
        """The KDC's profile."""
        return self.root / "kdc.conf"

    @property
    def krb5_conf_path(self) -> Path:
        """The clients' profile: point ``KRB5_CONFIG`` (or the JVM's krb5.conf) at it."""
        return self.root / "krb5.conf"

    @property
    def log_path(self) -> Path:
        """The KDC's log (one line per ticket request)."""
        return self.root / "kdc.log"

    def keytab_path(self, name: str) -> Path:
        """Where :meth:`add_principal` puts the keytab of ``name`` (``/`` becomes ``_``)."""
        return self.root / f"{name.replace('/', '_')}.keytab"

    def principal(self, name: str) -> str:
        """``name@REALM``."""
        return name if "@" in name else f"{name}@{self.realm}"

    def environ(self, ccache: Path | None = None) -> dict[str, str]:
        """Environment for MIT clients of this realm (``KRB5_CONFIG``, a private ccache)."""
        return {
            "KRB5_CONFIG": str(self.krb5_conf_path),
            "KRB5CCNAME": f"FILE:{ccache or self.root / 'ccache'}",
        }

    def jvm_flags(self) -> list[str]:
        """JVM flags for this realm: the JVM ignores ``KRB5_CONFIG``."""
        return [f"-Djava.security.krb5.conf={self.krb5_conf_path}"]

    # --- lifecycle --------------------------------------------------------------------------

    def start(self, timeout: float = _START_TIMEOUT) -> LocalKdc:
        """Create the realm (first call only), then start ``krb5kdc`` and wait for its port.

        Raises:
            LocalKafkaError: a command is missing or failed, or the KDC did not answer in time.
        """
        require_krb5()
        if self.is_running:
            raise LocalKafkaError(f"the KDC of {self.realm} is already running")
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = pick_tcp_udp_port()
        self._write_profiles()
        if not self._created:
            password = secrets.token_hex(16)
            self._run(["kdb5_util", "-r", self.realm, "create", "-s", "-P", password])
            (self.root / "kadm5.acl").write_text("", encoding="utf-8")
            self._created = True
        env = {**os.environ, **self._kdc_environ()}
        if self.time_offset is not None:
            # libfaketime preloaded into krb5kdc itself (the faketime command would fork, and
            # stopping it would leave the KDC behind).
            env.update(LD_PRELOAD=find_libfaketime(), FAKETIME=self.time_offset)
        command = [*reaper.parent_death_prefix(), self._command("krb5kdc"), "-n", "-r", self.realm]
        with (self.root / "krb5kdc.out").open("ab") as out:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.root,
                env=env,
                start_new_session=True,
            )
        reaper.track(self._process)
        self._wait_listening(time.monotonic() + timeout)
        return self

    def stop(self) -> None:
        """Stop ``krb5kdc`` (SIGTERM, SIGKILL after 5 s). Safe to call twice."""
        process = self._process
        if process is None:
            return
        reaper.stop_processes([process], grace=5.0)
        reaper.untrack(process)
        self._process = None

    @property
    def is_running(self) -> bool:
        """Whether the KDC process started here is alive."""
        return self._process is not None and self._process.poll() is None

    def __enter__(self) -> LocalKdc:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # --- principals -------------------------------------------------------------------------

    def add_principal(
        self, name: str, *, keytab: Path | None = None, max_life: str | None = None
    ) -> Path:
        """Create ``name`` with a random key and extract it into a keytab (once).

        Args:
            name: ``client`` or ``kafka/localhost`` (the realm is added).
            keytab: where to write the keytab (default :meth:`keytab_path`).
            max_life: the principal's longest ticket (e.g. ``"15s"``); default the realm's.

        Returns:
            The keytab's path.
        """
        principal = self.principal(name)
        life = ["-maxlife", max_life] if max_life else []
        self.kadmin(["addprinc", "-randkey", *life, principal])
        path = keytab or self.keytab_path(name)
        # -norandkey: extract the current key; every plain ktadd would make a new one.
        self.kadmin(["ktadd", "-k", str(path), "-norandkey", principal])
        if not path.exists():
            raise LocalKafkaError(f"kadmin.local wrote no keytab for {principal} at {path}")
        return path

    def change_key(self, name: str) -> None:
        """Give ``name`` a new random key: keytabs extracted before no longer match the KDC."""
        self.kadmin(["cpw", "-randkey", self.principal(name)])

    def kadmin(self, query: Sequence[str]) -> str:
        """Run one ``kadmin.local`` query; its output.

        Raises:
            LocalKafkaError: the query failed (kadmin.local exits 0 anyway; its error lines
                are recognised).
        """
        text = " ".join(_kadmin_quote(part) for part in query)
        output = self._run(["kadmin.local", "-r", self.realm, "-q", text])
        errors = [
            line
            for line in output.splitlines()
            if _KADMIN_ERROR.search(line) and not line.startswith("Authenticating as")
        ]
        if errors:
            raise error_with_output(f"kadmin.local {query[0]} failed", output)
        return output

    def kinit(self, name: str, keytab: Path, ccache: Path, lifetime: str | None = None) -> None:
        """``kinit -k -t keytab name`` into ``ccache`` (what a developer's ``kinit`` does)."""
        life = ["-l", lifetime] if lifetime else []
        self._run(
            ["kinit", *life, "-k", "-t", str(keytab), "-c", f"FILE:{ccache}", self.principal(name)]
        )

    def log_lines(self, kind: str, principal: str) -> list[str]:
        """The KDC log's ``kind`` (``AS_REQ``, ``TGS_REQ``) lines that issued for ``principal``."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return []
        who = self.principal(principal)
        return [
            line
            for line in text.splitlines()
            if f" {kind} " in line and "ISSUE:" in line and who in line
        ]

    # --- internals --------------------------------------------------------------------------

    def _kdc_environ(self) -> dict[str, str]:
        return {
            "KRB5_KDC_PROFILE": str(self.kdc_conf_path),
            "KRB5_CONFIG": str(self.krb5_conf_path),
            "KRB5CCNAME": f"FILE:{self.root / 'ccache-admin'}",
        }

    def _write_profiles(self) -> None:
        port = self.port
        assert port is not None
        self.kdc_conf_path.write_text(
            kdc_conf(self.realm, self.root, port, self.max_life, self._database), encoding="utf-8"
        )
        self.krb5_conf_path.write_text(
            krb5_conf(self.realm, port, kdc_timesync=self.kdc_timesync), encoding="utf-8"
        )

    def _command(self, name: str) -> str:
        found = find_krb5_command(name)
        if found is None:
            require_krb5()
            raise LocalKafkaError(f"{name} is not installed")  # pragma: no cover
        return found

    def _run(self, command: list[str]) -> str:
        argv = [self._command(command[0]), *command[1:]]
        try:
            done = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=_COMMAND_TIMEOUT,
                env={**os.environ, **self._kdc_environ()},
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise LocalKafkaError(f"{command[0]} took more than {_COMMAND_TIMEOUT:.0f} s") from exc
        output = done.stdout + done.stderr
        if done.returncode != 0:
            raise error_with_output(f"{command[0]} failed with exit code {done.returncode}", output)
        return output

    def _wait_listening(self, deadline: float) -> None:
        port = self.port
        assert port is not None
        while True:
            process = self._process
            if process is None or process.poll() is not None:
                code = None if process is None else process.returncode
                self.stop()
                raise error_with_output(
                    f"krb5kdc exited with code {code} while starting", self._output()
                )
            if port_accepts(LOOPBACK, port, timeout=1.0):
                return
            if time.monotonic() >= deadline:
                self.stop()
                raise error_with_output(
                    f"krb5kdc did not listen on {LOOPBACK}:{port} in time", self._output()
                )
            time.sleep(0.05)

    def _output(self) -> str:
        parts = []
        for name in ("krb5kdc.out", "kdc.log"):
            with contextlib.suppress(OSError):
                parts.append((self.root / name).read_text(encoding="utf-8", errors="replace"))
        return "\n".join(parts)


def _kadmin_quote(part: str) -> str:
    return f'"{part}"' if " " in part else part
