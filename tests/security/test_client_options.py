"""Where credentials come from besides `credentials=`: the Spark options `accessKey`, `secretKey` and
`securityToken`, and the environment variables of the command line, the jobs and the notebooks. A
half-given pair is an error that names the missing setting, never a value."""

from __future__ import annotations

import pytest

from rocketspark import SessionCredentials
from rocketspark.apps.common import rocketmq_options
from rocketspark.client.config import credentials_from_env
from rocketspark.errors import ConfigError
from rocketspark.spark.options import parse
from rocketspark.spark.sink.options import parse_sink

BASE = {"nameserver": "127.0.0.1:9876", "topic": "Orders"}


def test_spark_options_sign_source_and_sink() -> None:
    options = {**BASE, "AccessKey": "ak-spark", "secretKEY": "s3cret", "securityToken": "tok"}
    expected = SessionCredentials("ak-spark", "s3cret", "tok")
    assert parse(options, streaming=False).credentials == expected
    assert parse_sink(options).credentials == expected
    assert parse(BASE, streaming=False).credentials is None
    assert parse_sink(BASE).credentials is None
    assert "s3cret" not in repr(parse(options, streaming=False)) + repr(parse_sink(options))


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"accessKey": "ak-spark"}, "secretKey is missing"),
        ({"secretKey": "s3cret"}, "accessKey is missing"),
        ({"accessKey": " ", "secretKey": "s3cret"}, "accessKey is missing"),
        ({"securityToken": "tok"}, "securityToken needs the options accessKey and secretKey"),
    ],
)
def test_half_given_credentials_are_refused_by_name(given: dict[str, str], message: str) -> None:
    for check in (lambda o: parse(o, streaming=False), parse_sink):
        with pytest.raises(ConfigError, match=message) as refused:
            check({**BASE, **given})
        assert "s3cret" not in str(refused.value)


def test_environment_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ROCKETMQ_ACCESS_KEY", "ROCKETMQ_SECRET_KEY", "ROCKETMQ_SECURITY_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    assert credentials_from_env() is None
    assert rocketmq_options("ns:9876", topic="T") == {"nameserver": "ns:9876", "topic": "T"}
    monkeypatch.setenv("ROCKETMQ_ACCESS_KEY", "ak-env")
    with pytest.raises(ConfigError, match="access key ak-env needs its secret key: set ROCKETMQ_SECRET_KEY"):
        credentials_from_env()
    monkeypatch.setenv("ROCKETMQ_SECRET_KEY", "s3cret-env")
    assert credentials_from_env() == SessionCredentials("ak-env", "s3cret-env")
    assert credentials_from_env("ak-flag") == SessionCredentials("ak-flag", "s3cret-env")
    monkeypatch.setenv("ROCKETMQ_SECURITY_TOKEN", "tok-env")
    assert rocketmq_options("ns:9876", topic="T", consumerGroup=None) == {
        "nameserver": "ns:9876",
        "accessKey": "ak-env",
        "secretKey": "s3cret-env",
        "securityToken": "tok-env",
        "topic": "T",
    }
