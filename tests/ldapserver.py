"""A real OpenLDAP server for the LDAP login tests: Debian's `slapd`, started on a free
loopback port with its own configuration and database in the test's directory, seeded
over LDAP with ldap3. Tests skip with the reason when slapd is not installed."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import ldap3
import pytest

from tests.ports import free_port

SUFFIX = "dc=example,dc=com"
ADMIN_DN = f"cn=admin,{SUFFIX}"
ADMIN_PW = "admin-secret"
_SCHEMAS = ("core", "cosine", "inetorgperson", "nis")
_MODULES = ("/usr/lib/ldap", "/usr/lib64/openldap", "/usr/lib/openldap")


def slapd_binary() -> str:
    found = shutil.which("slapd") or next(
        (p for p in ("/usr/sbin/slapd", "/usr/libexec/slapd") if Path(p).exists()), None
    )
    if found is None:
        pytest.skip("slapd (Debian's slapd package) is not installed: no LDAP server to test")
    return found


class Slapd:
    """One slapd process on 127.0.0.1:`port`, its files under `directory`."""

    def __init__(self, directory: Path) -> None:
        binary = slapd_binary()
        self.directory = directory
        data = directory / "data"
        data.mkdir(parents=True)
        modules = next((m for m in _MODULES if Path(m, "back_mdb.so").exists()), None)
        conf = "".join(f"include /etc/ldap/schema/{s}.schema\n" for s in _SCHEMAS)
        if modules is not None:
            conf += f"modulepath {modules}\nmoduleload back_mdb\n"
        conf += (
            f"pidfile {directory / 'slapd.pid'}\n"
            "database mdb\n"
            f'suffix "{SUFFIX}"\n'
            f'rootdn "{ADMIN_DN}"\n'
            f"rootpw {ADMIN_PW}\n"
            f"directory {data}\n"
            "maxsize 16777216\n"
        )
        (directory / "slapd.conf").write_text(conf)
        self.port = free_port()
        self.url = f"ldap://127.0.0.1:{self.port}"
        self.log = (directory / "slapd.log").open("wb")
        self.proc = subprocess.Popen(
            [binary, "-f", str(directory / "slapd.conf"), "-h", f"{self.url}/", "-d", "0"],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self._wait()

    def _wait(self, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"slapd exited: {(self.directory / 'slapd.log').read_text(errors='replace')}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), 0.5):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("slapd did not start listening")

    def admin(self) -> ldap3.Connection:
        server = ldap3.Server("127.0.0.1", port=self.port, connect_timeout=5)
        return ldap3.Connection(server, ADMIN_DN, ADMIN_PW, auto_bind=True, receive_timeout=5)

    def seed(self, users: dict[str, str], groups: dict[str, list[str]]) -> None:
        """ou=People (inetOrgPerson cn=NAME with userPassword) and ou=groups (groupOfNames
        cn=GROUP whose members are users)."""
        c = self.admin()
        try:
            c.add(SUFFIX, ["dcObject", "organization"], {"dc": "example", "o": "Example"})
            c.add(f"ou=People,{SUFFIX}", ["organizationalUnit"], {"ou": "People"})
            c.add(f"ou=groups,{SUFFIX}", ["organizationalUnit"], {"ou": "groups"})
            for name, password in users.items():
                ok = c.add(
                    f"cn={name},ou=People,{SUFFIX}",
                    ["inetOrgPerson"],
                    {"cn": name, "sn": name, "userPassword": password},
                )
                assert ok, c.result
            for group, members in groups.items():
                ok = c.add(
                    f"cn={group},ou=groups,{SUFFIX}",
                    ["groupOfNames"],
                    {"cn": group, "member": [f"cn={m},ou=People,{SUFFIX}" for m in members]},
                )
                assert ok, c.result
        finally:
            c.unbind()  # (ldap3's `with` leaves an auto-bound connection open)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()
