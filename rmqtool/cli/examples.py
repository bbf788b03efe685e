"""One runnable example per command, shown at the end of its ``--help`` and in docs/commands.md, and
run by tests/test_docs.py (paths under fixtures/ are the bundled stores; /tmp/ paths are scratch, where
the tests unpack fixtures/reference/*.tar.gz and earlier examples leave their output)."""
from __future__ import annotations

EXAMPLES: dict[str, list[str]] = {
    "info": ["rmqtool info fixtures/reference/crashed"],
    "verify": ["rmqtool verify fixtures/reference/basic --level deep --limit-per-check 5"],
    "stats": ["rmqtool stats fixtures/reference/basic --by minute"],
    "consumers": ["rmqtool consumers fixtures/reference/consumers --group cg-order-mid"],
    "reset-offsets": ["rmqtool reset-offsets fixtures/reference/consumers --group cg-order-mid --to-earliest"],
    "report": ["rmqtool report fixtures/reference/crashed -o /tmp/crashed-report.html"],
    "query-key": ["rmqtool query-key fixtures/reference/basic key-0011 --topic OrderTopic -f jsonl"],
    "query-id": ["rmqtool query-id fixtures/reference/basic C0A8010A00002A9F00000000000005C2"],
    "query-queue": ["rmqtool query-queue fixtures/reference/basic -t TopicTest -q 1 --time 2026-11-21T12:21:50Z"],
    "query-delayed": ["rmqtool query-delayed fixtures/reference/consumers --topic PayTopic"],
    "query-transactions": ["rmqtool query-transactions fixtures/reference/mixed -f jsonl"],
    "query-timer": ["rmqtool query-timer /tmp/timer --due-before 2026-12-01"],
    "locate": ["rmqtool locate fixtures/reference/basic --topic TopicTest --queue 1 --queue-offset 41"],
    "dump commitlog": ["rmqtool dump commitlog fixtures/reference/mixed --topic V6Topic -n 3 --body hex"],
    "dump consumequeue": ["rmqtool dump consumequeue fixtures/reference/propcrc-lmq-batchcq --topic BatchCqTopic"],
    "dump consumequeue-ext": ["rmqtool dump consumequeue-ext /tmp/cq-ext --topic BenchTopic0 --queue 1 --limit 5"],
    "dump index": ["rmqtool dump index fixtures/reference/basic --header-only"],
    "dump checkpoint": ["rmqtool dump checkpoint fixtures/reference/basic"],
    "dump dledger-entries": ["rmqtool dump dledger-entries /tmp/dledger --limit 5"],
    "dump dledger-index": ["rmqtool dump dledger-index /tmp/dledger --limit 5"],
    "dump timerlog": ["rmqtool dump timerlog /tmp/timer --limit 5"],
    "dump timerwheel": ["rmqtool dump timerwheel /tmp/timer"],
    "dump timercheck": ["rmqtool dump timercheck /tmp/timer"],
    "rebuild consumequeue": ["rmqtool rebuild consumequeue fixtures/reference/basic --output /tmp/cq --yes"],
    "rebuild index": ["rmqtool rebuild index fixtures/reference/basic --dry-run"],
    "rebuild all": ["rmqtool rebuild all fixtures/reference/basic --output /tmp/rebuilt"],
    "rebuild batchconsumequeue": ["rmqtool rebuild batchconsumequeue fixtures/reference/propcrc-lmq-batchcq "
                                  "--output /tmp/bcq"],
    "rebuild timerwheel": ["rmqtool rebuild timerwheel /tmp/timer --output /tmp/timerwheel"],
    "write": ["rmqtool write /tmp/synthetic --synthetic 1000 --prop-crc"],
    "export": ["rmqtool export fixtures/reference/basic -o /tmp/export --format jsonl --body text"],
    "compare": ["rmqtool compare fixtures/reference/rocksdb-cq /tmp/cq-rocks --queues"],
    "convert": ["rmqtool convert /tmp/dledger --into commitlog --output /tmp/classic"],
}
#: what an example needs run before it (an earlier example's output)
SETUP = {"compare": ["rmqtool rebuild consumequeue fixtures/reference/rocksdb-cq --output /tmp/cq-rocks"],
         "dump consumequeue-ext": ["rmqtool write /tmp/cq-ext --synthetic 40 --topics 1 --queues 2 --cq-ext "
                                   "--cq-ext-file-size 256 --commitlog-file-size 65536 --cq-file-size 400"]}


def epilog(command: str) -> str | None:
    lines = EXAMPLES.get(command)
    if not lines:
        return None
    return "Example:\n\n" + "\n".join(f"    {line}" for line in lines)


def attach(app) -> None:
    """Give every registered command its example as the ``--help`` epilog."""
    for info in app.registered_commands:
        if info.name and info.epilog is None:
            info.epilog = epilog(info.name)
    for group in app.registered_groups:
        for info in group.typer_instance.registered_commands:
            if info.name and info.epilog is None:
                info.epilog = epilog(f"{group.name} {info.name}")
