"""Every fenced example of the README and the docs pages below runs as written, in order, against
servers of the page's own (how each kind of block runs: `tests/docs/examples.py`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.docs.examples import SERVER, TOPIC_NAMES, Block, PageRun, blocks, logical_lines, may_start_early

PAGES = (
    "README.md",
    "docs/getting-started.md",
    "docs/client.md",
    "docs/cli.md",
    "docs/security.md",
    "docs/spark.md",
)
BLOCKS = [block for page in PAGES for block in blocks(page) if block.runs]
#: the blocks marked `<!-- doc-test: skip REASON -->` in the docs, and why they cannot run as written
NOT_RUN = [
    (
        "README.md",
        "runs the whole suite and the demo: .ci/run runs the suite, tests/integration/test_main_job.py the demo",
    ),
    ("docs/getting-started.md", "installs from PyPI: tests/cli/test_install_without_spark.py installs without Spark"),
    ("docs/getting-started.md", "runs the demo job: tests/integration/test_main_job.py runs it"),
    ("docs/cli.md", "runs the demo with 100,000 events: tests/integration/test_main_job.py runs the demo"),
    ("docs/spark.md", "a fragment of the examples above"),
    ("docs/spark.md", "a job for a cluster: tests/spark/cluster_job.py runs it on local-cluster"),
    ("docs/spark.md", "needs a Spark standalone cluster"),
]


def test_the_blocks_left_out_are_the_listed_ones() -> None:
    assert [(b.page, b.argument) for b in BLOCKS if b.directive == "skip"] == NOT_RUN


def test_server_lines_are_told_from_other_commands() -> None:
    for line in (
        "rocketspark dev",
        ".venv/bin/python -m rocketspark.dev      # name server 127.0.0.1:9876",
        "rocketspark namesrv --tls.server.mode enforcing --tls.server.certPath server.pem &",
        "rocketspark broker --namesrv 127.0.0.1:9876 --set aclEnable=true",
        "python -m broker -c /etc/rocketspark/broker.conf",
    ):
        assert SERVER.match(line), line
    for line in ("rocketspark topic create Orders", "rocketspark --tls topic list", "python -m rocketspark.cli dev"):
        assert not SERVER.match(line), line
    assert logical_lines("a \\\n    b\nc\n") == ["a b", "c"]


def test_an_example_that_reads_a_topic_named_before_it_does_not_start_early() -> None:
    """What decides which Spark examples run side by side."""
    writes = 'producer.send_arrow(table, "Events")\nconsumer.subscribe("Orders", "a || b")'
    assert set(TOPIC_NAMES.findall(writes)) == {"Events", "Orders"}
    reads = 'spark.read.format("rocketmq").option("topic", "Events").load()'
    assert not may_start_early(reads, {"Events", "Orders"})
    assert may_start_early(reads, {"Orders"})
    assert not may_start_early('spark.read.format("rocketmq").option("topicPattern", "E.*").load()', set())
    assert not may_start_early("spark.range(3).count()", set())  # names no topic: may read any


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, PageRun]]:
    runs: dict[str, PageRun] = {}
    try:
        yield runs
    finally:
        for run in runs.values():
            run.close()


def page_run(pages: dict[str, PageRun], page: str, tmp_path_factory: pytest.TempPathFactory) -> PageRun:
    if page not in pages:
        pages[page] = PageRun(page, tmp_path_factory.mktemp(page.replace("/", "-")))
        if not any(b.starts_servers for b in BLOCKS if b.page == page):
            pages[page].start_default_servers()
    return pages[page]


def start_next_spark_example(run: PageRun, block: Block) -> None:
    """A Spark example boots a JVM for tens of seconds, mostly on one core: the page's next one
    starts with it, ahead of its test, unless a block between them could change what it reads
    (it names a topic they name, or no topic: it starts in its own test then)."""
    later = [b for b in BLOCKS if b.page == block.page and b.line > block.line]
    named: set[str] = set(TOPIC_NAMES.findall(block.body))
    for other in later:
        if other.starts_spark:
            if other.line not in run.python_runs and may_start_early(other.body, named):
                run.start_python(other)
            return
        if other.directive == "skip":
            continue  # does not run
        if other.lang not in ("python", "py") or other.directive is not None:
            return  # a command or a file in between: it may change anything
        named |= set(TOPIC_NAMES.findall(other.body))


@pytest.mark.slow  # a few run Spark in a process of their own
@pytest.mark.parametrize("block", [pytest.param(b, id=b.id) for b in BLOCKS])
def test_example_runs(pages: dict[str, PageRun], tmp_path_factory: pytest.TempPathFactory, block: Block) -> None:
    run = page_run(pages, block.page, tmp_path_factory)
    if block.directive == "skip":
        pytest.skip(block.argument)
    elif block.directive == "file":
        run.write_file(block)
    elif block.lang in ("python", "py"):
        if block.starts_spark:
            if block.line not in run.python_runs:
                run.start_python(block)
            start_next_spark_example(run, block)
        finished = run.finish_python(block)
        assert finished.process.returncode == 0, f"{block.id}\n{finished.output()}"
    elif block.lang == "console":
        run.run_console(block)
    else:
        run.run_shell(block)
