"""The README's Spark example, extracted and run as written (a fresh Python, its own Spark).

The script is started before the broker listens, on a port chosen here, so its
``wait_for_broker`` is what lets it succeed; it must print the queue count, 1000.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from interop.spark import ConfigError, wait_for_broker
from tests.integration.broker_process import BrokerProcess
from tests.ports import spare_port

pytest.importorskip("pyspark", reason="the Spark connector needs pyspark (the spark extra)")

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"```python\n(# spark_example\.py\n.*?)```", re.DOTALL)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_readme_spark_example_runs_as_written(tmp_path: Path) -> None:
    [script] = BLOCK.findall((ROOT / "README.md").read_text())
    assert 'master("local[2,4]")' in script and "wait_for_broker(url" in script
    (tmp_path / "spark_example.py").write_text(script)
    port = spare_port()
    env = dict(os.environ, AMQP_URL=f"amqp://guest:guest@127.0.0.1:{port}/%2F")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    run = subprocess.Popen(
        [sys.executable, "spark_example.py"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        broker = BrokerProcess(tmp_path / "data", port=port)  # after the script started
    except BaseException:
        run.kill()
        run.communicate()
        raise
    try:
        out, err = run.communicate(timeout=240)
    finally:
        broker.stop()
    assert run.returncode == 0, err[-3000:]
    assert out.strip().splitlines()[-1] == "1000"


def test_wait_for_broker_returns_gives_up_and_refuses(tmp_path: Path) -> None:
    closed = f"amqp://guest:secret@127.0.0.1:{spare_port()}/%2F"
    with pytest.raises(TimeoutError, match="no AMQP broker answered at amqp://guest:\\*\\*\\*@"):
        wait_for_broker(closed, timeout=0.5)
    broker = BrokerProcess(tmp_path / "data")
    try:
        wait_for_broker(broker.url, timeout=30)
        with pytest.raises(ConfigError, match="refused the connection") as info:
            wait_for_broker(broker.url.replace("guest:guest", "guest:wrong"), timeout=30)
        assert "wrong" not in str(info.value)
    finally:
        broker.stop()
