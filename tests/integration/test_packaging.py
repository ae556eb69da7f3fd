"""The systemd unit in packaging/ (checked by ``systemd-analyze verify``; scripts/test-all
installs systemd where it is missing)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "packaging" / "amqpd.service"


def test_systemd_unit_verifies_cleanly(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    assert analyze is not None, "scripts/test-all installs systemd (systemd-analyze)"
    amqpd = Path(sys.executable).parent / "amqpd"
    text = UNIT.read_text()
    assert "ExecStart=/usr/local/bin/amqpd" in text
    unit = tmp_path / "amqpd.service"  # verify checks that ExecStart exists: use this one
    unit.write_text(text.replace("/usr/local/bin/amqpd", str(amqpd)))
    result = subprocess.run(
        [analyze, "verify", "--man=no", str(unit)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == ""  # no unknown keys or bad values


def test_unit_runs_the_broker_as_the_docs_say() -> None:
    text = UNIT.read_text()
    for line in (
        "User=amqpd",
        "Environment=AMQPD_DATA_DIR=/var/lib/amqpd",
        "Environment=AMQPD_CONFIG=/etc/amqpd/amqpd.conf",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "RestartPreventExitStatus=2",
    ):
        assert line in text.splitlines()
    operations = (ROOT / "docs" / "operations.md").read_text()
    assert "packaging/amqpd.service" in operations
