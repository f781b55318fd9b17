"""The dashboard in a real browser (headless Debian chromium through selenium), against a name
server, two brokers and `rocketspark dashboard` run as processes: what a person sees on each page.

One browser serves the module; the broker-down test stops a broker, so it runs last.
"""

from __future__ import annotations

import asyncio
import os
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from rocketspark.client.api.offset import update_consumer_offset
from rocketspark.client.sync import Producer
from rocketspark.message.ids import decode_offset_msg_id
from rocketspark.message.message import Message
from rocketspark.processes import ServerProcess
from rocketspark.protocol.codes import RequestCode
from rocketspark.protocol.command import RemotingCommand
from rocketspark.protocol.headers.send import ConsumerSendMsgBackRequestHeader
from rocketspark.remoting.client import RemotingClient
from tests.dashboard.browser import click_and_load, screenshot, start_browser, stop_browser, text, wait_for
from tests.harness import ServerFactory

T = TypeVar("T")
PASSWORD = "s3cret pass"


class Cluster:
    def __init__(self, factory: ServerFactory, base: Path) -> None:
        self.namesrv = factory.namesrv()
        self.brokers = {
            "broker-a": factory.broker(self.namesrv.address, broker_name="broker-a"),
            "broker-b": factory.broker(self.namesrv.address, "--set", "flavor=apache", broker_name="broker-b"),
        }
        self.base = base
        self.dashboard = self._dashboard(factory, "dashboard")
        os.environ["ROCKETSPARK_DASHBOARD_PASSWORD"] = PASSWORD
        try:
            self.guarded = self._dashboard(factory, "guarded")
        finally:
            del os.environ["ROCKETSPARK_DASHBOARD_PASSWORD"]
        self.producer = Producer("dashboard_test_producer", namesrv_addr=self.namesrv.address)
        self.producer.start()

    def _dashboard(self, factory: ServerFactory, name: str) -> ServerProcess:
        args = ["dashboard", "-n", self.namesrv.address, "--port", "0", "--data-dir", str(self.base / name)]
        process = ServerProcess(
            "rocketspark.cli", [*args, "--sample-interval", "0.5", "--refresh", "1"], self.base / f"{name}.log"
        )
        factory.processes.append(process)
        process.start()
        return process

    def url(self, path: str, process: ServerProcess | None = None) -> str:
        return f"http://{(process or self.dashboard).address}{path}"

    def send(self, topic: str, body: bytes, **fields: Any) -> Any:
        return self.producer.send(Message(topic, body, **fields))


def rpc(work: Callable[[RemotingClient], Awaitable[T]]) -> T:
    async def run() -> T:
        client = RemotingClient(request_timeout_s=10)
        try:
            return await work(client)
        finally:
            await client.close()

    return asyncio.run(run())


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    base = tmp_path_factory.mktemp("dashboard")
    factory = ServerFactory(base / "servers")
    try:
        cluster = Cluster(factory, base)
        yield cluster
        cluster.producer.shutdown()
    finally:
        factory.stop_all()


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    driver, profile = start_browser()
    try:
        yield driver
    finally:
        stop_browser(driver, profile)


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("screenshots")


def chart_points(driver: WebDriver) -> int:
    """The points plotly drew in the page's chart (its SVG markers)."""
    return len(driver.find_elements(By.CSS_SELECTOR, "#chart .scatterlayer .points path"))


def test_cluster_page_shows_the_brokers_and_a_throughput_chart(
    cluster: Cluster, browser: WebDriver, shots: Path
) -> None:
    for i in range(20):
        cluster.send("ClusterTraffic", f"m{i}".encode())
    browser.get(cluster.url("/"))
    rows = {
        row.get_attribute("data-broker"): row.text
        for row in browser.find_elements(By.CSS_SELECTOR, "#brokers tr[data-broker]")
    }
    assert set(rows) == {"broker-a", "broker-b"}
    for name, row in rows.items():
        assert cluster.brokers[name].address in row and "rocketspark 0.1.0" in row and " %" in row, row
    assert " rocketspark " in rows["broker-a"] and " apache " in rows["broker-b"]
    assert "answering" in text(browser, "#namesrvs")
    wait_for(browser, lambda d: chart_points(d) >= 2, what="the throughput chart's points")
    screenshot(browser, "cluster", shots)


def test_topic_page_shows_a_groups_lag_after_it_commits(cluster: Cluster, browser: WebDriver, shots: Path) -> None:
    browser.get(cluster.url("/topics"))
    browser.find_element(By.CSS_SELECTOR, "#create-topic input[name=topic]").send_keys("Orders")
    browser.find_element(By.CSS_SELECTOR, "#create-topic input[name=queues]").clear()
    browser.find_element(By.CSS_SELECTOR, "#create-topic input[name=queues]").send_keys("2")
    click_and_load(browser, "#create-topic button")
    wait_for(browser, lambda d: "created topic Orders with 2 queues" in text(d, "#notice"), what="the create notice")
    results = [cluster.send("Orders", f"order {i}".encode(), keys=f"order-{i}") for i in range(10)]
    # a consumer of group Billing commits where it got to: 3 messages of each queue of broker-a
    address = cluster.brokers["broker-a"].address
    queues = [0, 1]
    rpc(
        lambda c: asyncio.gather(
            *(update_consumer_offset(c, address, "Billing", "Orders", q, 3, oneway=False) for q in queues)
        )
    )

    def lag() -> int:  # every queue's messages past the group's offset (none committed on broker-b)
        stored = Counter(r.message_queue for r in results)
        return sum(max(0, n - (3 if q.broker_name == "broker-a" else 0)) for q, n in stored.items())

    browser.get(cluster.url("/topics/Orders"))
    assert text(browser, "#stored") == "10"
    assert int(text(browser, "#readers tr[data-group=Billing] .lag")) == lag()
    # live: new messages show without a full reload of the page
    browser.execute_script("window.stillThisPage = true")
    results += [cluster.send("Orders", f"late {i}".encode()) for i in range(5)]
    wait_for(browser, lambda d: text(d, "#stored") == "15", what="the stored count refreshed")
    assert browser.execute_script("return window.stillThisPage") is True
    wait_for(browser, lambda d: chart_points(d) >= 1, what="the messages-in chart's points")
    screenshot(browser, "topic", shots)

    browser.get(cluster.url("/groups/Billing"))
    assert int(text(browser, "#lag")) == lag()
    wait_for(browser, lambda d: chart_points(d) >= 2, what="the lag chart's points")
    screenshot(browser, "group", shots)
    browser.get(cluster.url("/groups"))
    assert "Orders" in text(browser, "#groups tr[data-group=Billing]")

    # reset to a time before every message: the whole topic is the lag again
    browser.get(cluster.url("/groups/Billing"))
    browser.execute_script("document.querySelector('#reset-group input[name=time]').value = '2020-01-01T00:00:00'")
    click_and_load(browser, "#reset-group button")
    assert text(browser, "#notice").startswith("reset group Billing to 2020-01-01 00:00:00 on Orders")
    assert int(text(browser, "#lag")) == 15


def test_a_message_is_found_by_key_and_shown_escaped(cluster: Cluster, browser: WebDriver, shots: Path) -> None:
    body = b'{"html": "<img src=x onerror=window.pwned=1>", "n": 1}'
    cluster.send("Web", body, keys="visit-42", tags="click", properties={"who<b>": "<i>me</i>"})
    browser.get(cluster.url("/messages?topic=Web&key=visit-42"))
    assert text(browser, "#found") == "1 message found"
    article = browser.find_element(By.CSS_SELECTOR, "article.message")
    assert '"html": "<img src=x onerror=window.pwned=1>"' in article.find_element(By.CSS_SELECTOR, "pre.body-json").text
    assert "who<b>=<i>me</i>" in article.find_element(By.CSS_SELECTOR, ".properties").text
    assert article.find_element(By.CSS_SELECTOR, ".tags").text == "click"
    assert browser.execute_script("return window.pwned === undefined") is True
    article.find_element(By.CSS_SELECTOR, "button[data-view=hex]").click()
    assert article.find_element(By.CSS_SELECTOR, "pre.body-hex").text.startswith("7b 22 68 74 6d 6c")
    screenshot(browser, "messages", shots)
    offset_msg_id = article.find_element(By.CSS_SELECTOR, ".offset-msg-id").text

    browser.get(cluster.url(f"/messages?msgId={offset_msg_id}"))
    assert text(browser, "article.message .keys") == "visit-42"
    now = int(time.time() * 1000)
    browser.get(cluster.url(f"/messages?topic=Web&start={now - 60_000}&end={now + 1000}"))
    assert text(browser, "#found") == "1 message found"
    browser.get(cluster.url(f"/messages?topic=Web&start={now + 1000}&end={now + 2000}"))
    assert text(browser, "#error-title") == "Not found"


def test_a_dead_letter_is_sent_back_to_its_topic(cluster: Cluster, browser: WebDriver) -> None:
    sent = cluster.send("Payments", b"failed payment", keys="pay-7")
    address, offset = decode_offset_msg_id(sent.offset_msg_id)
    header = ConsumerSendMsgBackRequestHeader(offset=offset, group="Payer", delay_level=-1)
    rpc(lambda c: c.invoke(address, RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, header)))
    browser.get(cluster.url("/messages?topic=%25DLQ%25Payer&key=pay-7"))
    wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "form.resend button"), what="the resend button")
    assert text(browser, "form.resend button") == "Send back to Payments"
    click_and_load(browser, "form.resend button")
    assert "back to Payments" in text(browser, "#notice")
    browser.get(cluster.url("/messages?topic=Payments&key=pay-7"))
    assert text(browser, "#found") == "2 messages found"


def test_a_change_without_its_csrf_token_is_refused(cluster: Cluster, browser: WebDriver) -> None:
    browser.get(cluster.url("/topics"))
    browser.find_element(By.CSS_SELECTOR, "#create-topic input[name=topic]").send_keys("Forged")
    browser.execute_script("document.querySelector('#create-topic input[name=csrf]').value = 'forged'")
    click_and_load(browser, "#create-topic button")
    assert text(browser, "#error-title") == "Refused"
    assert "CSRF token" in text(browser, "#error")
    browser.get(cluster.url("/topics/Forged"))
    assert text(browser, "#error-title") == "Not found"


def test_bad_input_gives_a_clear_page(cluster: Cluster, browser: WebDriver) -> None:
    browser.get(cluster.url("/messages?topic=Orders&start=yesterday-ish"))
    assert text(browser, "#error-title") == "Bad input" and "is not a time" in text(browser, "#error")
    browser.get(cluster.url("/topics/NoSuchTopic"))
    assert "topic NoSuchTopic does not exist" in text(browser, "#error")
    huge = urllib.request.Request(cluster.url("/topics"), data=b"x" * 200_000, method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(huge, timeout=10)
    assert refused.value.code == 413 and b"requests are limited to 64 KiB" in refused.value.read()


def test_the_password_guards_every_page(cluster: Cluster, browser: WebDriver) -> None:
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(cluster.url("/api/cluster/series", cluster.guarded), timeout=10)
    assert refused.value.code == 401
    browser.get(cluster.url("/topics", cluster.guarded))
    assert browser.find_elements(By.CSS_SELECTOR, "#login input[type=password]")
    assert "Orders" not in browser.page_source
    browser.find_element(By.CSS_SELECTOR, "#login input[type=password]").send_keys("wrong")
    click_and_load(browser, "#login button")
    assert text(browser, "#login-failed") == "Wrong password."
    browser.find_element(By.CSS_SELECTOR, "#login input[type=password]").send_keys(PASSWORD)
    click_and_load(browser, "#login button")
    wait_for(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#topics tr[data-topic=Orders]"), what="the topics")


def test_a_broker_down_is_shown_unreachable_beside_the_others(
    cluster: Cluster, browser: WebDriver, shots: Path
) -> None:
    cluster.brokers["broker-b"].stop()
    browser.get(cluster.url("/"))
    wait_for(browser, lambda d: "unreachable" in text(d, "#brokers tr[data-broker=broker-b]"), what="broker-b down")
    assert "rocketspark 0.1.0" in text(browser, "#brokers tr[data-broker=broker-a]")
    screenshot(browser, "broker-down", shots)
    browser.get(cluster.url("/topics"))
    assert browser.find_elements(By.CSS_SELECTOR, "#topics tr[data-topic=Orders]")
    started = time.monotonic()
    browser.get(cluster.url("/groups/Billing"))
    assert text(browser, "#name") == "Billing" and time.monotonic() - started < 10
