"""Settings: the table, the precedence of their sources, the config file, the checks."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from amqpd.cli.main import build_parser, settings_from
from amqpd.cli.options import CONVERTED_KEYS, PLAIN_KEYS, SETTINGS
from amqpd.cli.settings import ConfEntry, SettingError, apply_plain_option, check_data_dir

DOCS = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def _settings(argv: list[str], env: dict[str, str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    return settings_from(parser, parser.parse_args(argv), env or {})


def _refused(argv: list[str], env: dict[str, str] | None = None) -> str:
    with pytest.raises(SettingError) as info:
        _settings(argv, env)
    text = str(info.value)
    assert "\n" not in text
    return text


def test_defaults() -> None:
    args = _settings([])
    assert (args.host, args.port, args.heartbeat, args.sync) == ("127.0.0.1", 5672, 60, "full")
    assert args.loopback_users == ("guest",)
    assert args.tls_verify_peer is False
    assert args.log_file is None


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        (["--port", "99999"], {}, "--port 99999: must be an integer from 0 to 65535"),
        ([], {"AMQPD_PORT": "abc"}, "AMQPD_PORT=abc: must be an integer from 0 to 65535"),
        ([], {"AMQPD_LOG_LEVEL": "VERBOSE"}, "AMQPD_LOG_LEVEL=VERBOSE: must be one of debug,"),
        ([], {"AMQPD_SYNC": "off"}, "AMQPD_SYNC=off: must be one of full, normal"),
        ([], {"AMQPD_TLS_VERIFY_PEER": "maybe"}, "AMQPD_TLS_VERIFY_PEER=maybe: must be true or"),
        (["--heartbeat", "-1"], {}, "--heartbeat -1: must be an integer from 0 to 65535"),
        (["--heartbeat", "70000"], {}, "--heartbeat 70000: must be an integer from 0 to 65535"),
        (["--max-message-size", "-5"], {}, "--max-message-size -5: must be an integer from 1"),
        (["--connection-max", "-3"], {}, "--connection-max -3: must be an integer from 0"),
        (["--frame-max", "100"], {}, "--frame-max 100: must be an integer from 4096"),
        (["--channel-max", "0"], {}, "--channel-max 0: must be an integer from 1 to 65535"),
        (["--disk-free-limit", "lots"], {}, "--disk-free-limit lots: must be a size"),
        (["--vm-memory-high-watermark", "1.5"], {}, "--vm-memory-high-watermark 1.5: must be"),
        (["--tls-cert", "/nonexistent/cert.pem"], {}, "--tls-cert /nonexistent/cert.pem: no such"),
        (["--host", "bad host!"], {}, "--host bad host!: must be an IP address or a host name"),
        (["--default-user", "admin"], {}, "give both or neither"),
    ],
)
def test_bad_values_are_one_line_naming_source_value_and_what_is_allowed(
    argv: list[str], env: dict[str, str], expected: str
) -> None:
    assert expected in _refused(argv, env)


def test_strict_booleans() -> None:
    assert _settings([], {"AMQPD_TLS_VERIFY_PEER": "Yes"}).tls_verify_peer is True
    assert _settings([], {"AMQPD_TLS_VERIFY_PEER": "0"}).tls_verify_peer is False
    assert (
        _settings(["--no-tls-verify-peer"], {"AMQPD_TLS_VERIFY_PEER": "1"}).tls_verify_peer is False
    )


def test_precedence_flag_env_file_default(tmp_path: Path) -> None:
    conf = tmp_path / "amqpd.conf"
    conf.write_text("heartbeat = 10\nchannel_max = 100\nframe_max = 8192\n")
    env = {"AMQPD_HEARTBEAT": "20", "AMQPD_CHANNEL_MAX": "200"}
    args = _settings(["--config", str(conf), "--heartbeat", "30"], env)
    assert args.heartbeat == 30  # flag over variable and file
    assert args.channel_max == 200  # variable over file
    assert args.frame_max == 8192  # file over default
    assert args.max_message_size == 128 << 20  # default
    assert _settings([], {"AMQPD_CONFIG": str(conf)}).heartbeat == 10


def test_rabbitmq_conf_keys(tmp_path: Path) -> None:
    cert = tmp_path / "cert.pem"
    cert.write_text("x")
    conf = tmp_path / "rabbitmq.conf"
    conf.write_text(
        "# a RabbitMQ file\n"
        "listeners.tcp.default = 0.0.0.0:5673\n"
        "listeners.ssl.default = 5674\n"
        f"ssl_options.certfile = {cert}\n"
        "ssl_options.verify = verify_peer\n"
        "ssl_options.fail_if_no_peer_cert = true\n"
        "vm_memory_high_watermark.absolute = 1GB\n"
        "disk_free_limit.absolute = 2GB\n"
        "loopback_users.guest = false\n"
        "log.console.level = debug\n"
        "connection_max = infinity\n"
        "cluster_formation.peer_discovery_backend = classic_config  # ignored\n"
        "\n"
    )
    args = _settings(["--config", str(conf)])
    assert (args.host, args.port, args.tls_port) == ("0.0.0.0", 5673, 5674)
    assert args.tls_cert == cert
    assert args.tls_verify_peer is True and args.tls_fail_if_no_peer_cert is True
    assert args.vm_memory_high_watermark == "1GB"
    assert args.disk_free_limit == 2_000_000_000
    assert args.loopback_users == ()
    assert args.log_level == "debug"
    assert args.connection_max == 0


def test_config_file_errors_name_the_line(tmp_path: Path) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text("heartbeat = 5\nheartbeat = -1\n")
    text = _refused(["--config", str(conf)])
    assert f"heartbeat = -1 ({conf} line 2): must be an integer from 0 to 65535" in text
    conf.write_text("no equals sign here\n")
    assert f"{conf} line 1: expected 'key = value'" in _refused(["--config", str(conf)])
    conf.write_text("hearbeat = 5\n")
    assert "unknown setting hearbeat" in _refused(["--config", str(conf)])
    assert "; did you mean heartbeat?" in _refused(["--config", str(conf)])
    conf.write_text("zzz = 5\n")
    assert "the keys amqpd knows are in docs/configuration.md" in _refused(["--config", str(conf)])
    conf.write_text("management.ssl.port = 15671\n")
    assert "plain HTTP only" in _refused(["--config", str(conf)])
    conf.write_text("management.tcp.ip = 0.0.0.0\nprometheus.tcp.ip = ::1\n")
    honoured = _settings(["--config", str(conf)])
    assert (honoured.management_host, honoured.prometheus_host) == ("0.0.0.0", "::1")
    conf.write_text("ssl_options.verify = sometimes\n")
    assert "must be verify_peer or verify_none" in _refused(["--config", str(conf)])
    missing = tmp_path / "missing.conf"
    assert f"--config {missing}: cannot read it" in _refused(["--config", str(missing)])


def test_every_setting_and_key_is_documented() -> None:
    docs = DOCS.read_text()
    for setting in SETTINGS:
        assert f"`{setting.flag}`" in docs, setting.flag
        assert setting.env in docs, setting.env
        for key in setting.conf:
            assert f"`{key}`" in docs, key
    for key in [*CONVERTED_KEYS, *PLAIN_KEYS, "listeners.tcp.default", "ssl_options.verify"]:
        assert f"`{key}`" in docs, key


def test_config_file_sets_options_added_by_hand() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--extra-port", type=int, default=15)
    entry = ConfEntry("extra.tcp.port", "16", "f line 1")
    args = parser.parse_args([])
    assert apply_plain_option(parser, args, "extra_port", entry)
    assert args.extra_port == 16
    args = parser.parse_args([])
    with pytest.raises(SettingError, match=r"extra\.tcp\.port = x \(f line 2\)"):
        apply_plain_option(parser, args, "extra_port", ConfEntry("extra.tcp.port", "x", "f line 2"))
    args = parser.parse_args(["--extra-port", "1"])
    apply_plain_option(parser, args, "extra_port", entry)
    assert args.extra_port == 1  # the flag wins
    assert not apply_plain_option(parser, args, "missing", entry)


def test_http_listener_settings(tmp_path: Path) -> None:
    conf = tmp_path / "c.conf"
    conf.write_text("management.tcp.port = 15673\nprometheus.tcp.port = 15693\n")
    args = _settings(["--config", str(conf)], {"AMQPD_NO_PROMETHEUS": "true"})
    assert (args.management_port, args.prometheus_port) == (15673, 15693)
    assert args.no_prometheus is True and args.no_management is False
    assert _settings(["--no-management"]).no_management is True
    assert "AMQPD_MANAGEMENT_PORT=x" in _refused([], {"AMQPD_MANAGEMENT_PORT": "x"})


def test_data_dir_checks(tmp_path: Path) -> None:
    data = tmp_path / "data"
    check_data_dir(data, ["amqpd.sqlite3"])
    assert data.is_dir()
    store = data / "amqpd.sqlite3"
    store.write_bytes(b"")
    check_data_dir(data, ["amqpd.sqlite3"])
    store.chmod(0o400)
    with pytest.raises(SettingError, match="not readable and writable"):
        check_data_dir(data, ["amqpd.sqlite3"])
    store.chmod(0o600)
    if os.geteuid() == 0:  # root can give the file away: the case of a store owned by another
        os.chown(store, 65534, 65534)
        with pytest.raises(SettingError, match="belongs to uid 65534"):
            check_data_dir(data, ["amqpd.sqlite3"])
    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(SettingError, match=r"afile: is not a directory \(it is a file\)$"):
        check_data_dir(afile, ["amqpd.sqlite3"])
    with pytest.raises(SettingError, match=r"afile is not a directory \(it is a file\)$"):
        check_data_dir(afile / "sub", ["amqpd.sqlite3"])
    unwritable = tmp_path / "unwritable"
    (unwritable / "amqpd.sqlite3").mkdir(parents=True)  # what no mode bit shows
    with pytest.raises(SettingError, match=r"amqpd.sqlite3 cannot be written \(Is a directory\)"):
        check_data_dir(unwritable, ["amqpd.sqlite3"])


def test_loopback_users_none(tmp_path: Path) -> None:
    conf = tmp_path / "c.conf"
    conf.write_text("loopback_users = none\n")
    assert _settings(["--config", str(conf)]).loopback_users == ()
    conf.write_text("loopback_users.guest = true\nloopback_users.ops = true\n")
    assert _settings(["--config", str(conf)]).loopback_users == ("guest", "ops")
    conf.write_text("loopback_users.guest = perhaps\n")
    assert "loopback_users.guest = perhaps" in _refused(["--config", str(conf)])


def test_a_misspelt_flag_gets_did_you_mean(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(["--managment-port", "0"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --managment-port 0; did you mean --management-port?" in err
