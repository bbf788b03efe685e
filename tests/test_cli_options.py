"""One option vocabulary: every command's options, read from the typer app, spell each concept one way
(old spellings only as hidden aliases), every closed set of values is a choice --help lists, every value
says what it is (no <str>/TEXT placeholders), help text carries no RST markup, commands are listed in
the order of work and global options work after the command."""
from __future__ import annotations

import re

import pytest
import typer

from conftest import reference_store, run_cli

#: concept -> the one canonical spelling (all its names) and the spellings it must not have beside it.
#: An alias applies to options that take a value (``info --count`` is a flag: count every message).
CONCEPTS = {
    "row limit": ({"--limit", "-n"}, {"--max", "--count", "--head", "--max-rows", "--rows"}),
    "topic": ({"--topic", "-t"}, {"--topic-name"}),
    "queue": ({"--queue", "-q"}, {"--queue-id", "--qid"}),
    "output file or directory": ({"--output", "-o"}, {"--to", "--out", "--dest", "--output-dir", "--destination"}),
    "worker processes": ({"--jobs", "-j"}, {"--workers", "--processes", "--procs"}),
    "format": ({"--format", "-f"}, {"--output-format", "--fmt"}),
}
#: options whose value is one of a closed set: --help must list the set
CHOICE_OPTIONS = {"--format", "--body", "--engine", "--level", "--layout", "--color", "--fail-on", "--boundary",
                  "--by", "--into"}
#: the top-level commands in the order of work (inspect, query, check, repair, export)
ORDER = ["info", "stats", "consumers", "dump", "locate", "query-key", "query-id", "query-queue", "query-timer",
         "query-delayed", "query-transactions", "verify", "compare", "report", "rebuild", "reset-offsets", "write",
         "convert", "export"]
PLACEHOLDER = re.compile(r"<(str|int|float|text|integer|path|bool)>|\bTEXT\b|\bINTEGER\b|\bFLOAT\b|\{\w|\{STORE")


def _root():
    from rmqtool.cli import app
    return typer.main.get_command(app)


def _commands():
    """(name, command) of every leaf command."""
    out, todo = [], [("rmqtool", _root())]
    while todo:
        name, cmd = todo.pop()
        for sub, c in getattr(cmd, "commands", {}).items():
            (todo if hasattr(c, "commands") else out).append((f"{name} {sub}", c))
    return sorted(out)


def _options(cmd):
    return [p for p in cmd.params if p.param_type_name == "option"]


def _help(path: list[str]) -> str:
    """The --help of a command, on a terminal wide enough that no line wraps."""
    import os
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "300"
    try:
        r = run_cli(*path, "--help")
    finally:
        os.environ.pop("COLUMNS") if old is None else os.environ.update(COLUMNS=old)
    assert r.code == 0, r.err
    return r.out


def test_each_concept_is_spelled_one_way_on_every_command():
    wrong = []
    for name, cmd in _commands():
        for p in _options(cmd):
            names = set(p.opts + p.secondary_opts)
            for concept, (canonical, aliases) in CONCEPTS.items():
                if names & canonical and names != canonical:
                    wrong.append(f"{name} {sorted(names)}: {concept} is {sorted(canonical)}")
                if names & aliases and not p.is_flag and not p.hidden:
                    wrong.append(f"{name} {sorted(names)}: {concept} is {sorted(canonical)}, "
                                 f"not {sorted(names & aliases)}")
    assert wrong == []


def test_every_closed_set_of_values_is_a_choice_that_help_lists():
    wrong = []
    for name, cmd in _commands():
        for p in _options(cmd):
            if set(p.opts) & CHOICE_OPTIONS and not hasattr(p.type, "choices"):
                wrong.append(f"{name} {p.opts[0]}: a free string, not a choice")
    for p in _options(_root()):
        if set(p.opts) & CHOICE_OPTIONS and not hasattr(p.type, "choices"):
            wrong.append(f"rmqtool {p.opts[0]}: a free string, not a choice")
    assert wrong == []
    text = _help(["query-queue"])
    assert "table|json|jsonl|csv|tsv" in text and "lower|upper" in text and "raw|text|hex|base64|none" in text
    assert "local|spark" in _help(["verify"]) and "shallow|deep" in _help(["verify"])


def test_every_format_option_offers_the_same_five_formats():
    """export's --format is the format of the files it writes (parquet|jsonl): its own choice."""
    wrong = []
    for name, cmd in _commands():
        for p in _options(cmd):
            if "--format" in p.opts and name != "rmqtool export" and \
                    list(getattr(p.type, "choices", ())) != ["table", "json", "jsonl", "csv", "tsv"]:
                wrong.append(f"{name}: {getattr(p.type, 'choices', p.type)}")
    assert wrong == []


def test_no_value_is_shown_as_a_type_placeholder():
    wrong = []
    for name in ["rmqtool", "rmqtool dump", "rmqtool rebuild", *(n for n, _ in _commands())]:
        text = _help(name.split()[1:])
        wrong += [f"{name}: {line.strip()}" for line in text.splitlines() if PLACEHOLDER.search(line)]
    assert wrong == []


def test_help_text_carries_no_rst_markup():
    from rmqtool.cli.reference import DOCS
    wrong = [f"{name}: {p.opts[0] if hasattr(p, 'opts') else 'help'}" for name, cmd in _commands()
             for p in [cmd, *cmd.params] if "``" in (getattr(p, "help", None) or "")]
    assert wrong == []
    page = (DOCS / "commands.md").read_text(encoding="utf-8")
    assert re.findall(r"(?<!`)``(?!`)", page) == []
    assert "``" not in _help(["verify"])


def test_commands_are_listed_in_the_order_of_work():
    root = _root()
    assert root.list_commands(root.context_class(root)) == ORDER
    text = _help([])
    listed = [n for n in re.findall(r"^\W*([a-z][a-z-]+)\s{2,}", text, re.M) if n in ORDER]
    assert listed == ORDER


@pytest.mark.parametrize("option", [["--wide"], ["--color", "never"], ["--color=never"], ["--traceback"]])
def test_global_options_work_after_the_command(option):
    store = reference_store("basic")
    before = run_cli(*option, "info", store, "-f", "json")
    after = run_cli("info", store, "-f", "json", *option)
    assert after.code == before.code == 0, after.err
    assert after.out == before.out


def test_global_options_after_a_subcommand_of_a_group():
    r = run_cli("dump", "checkpoint", reference_store("basic"), "--wide", "--color", "never", "-f", "json")
    assert r.code == 0, r.err
    assert "--commitlog-dirs" in _help(["info", "--wide"])          # a command's --help stays its own


def test_usage_lines_name_what_is_wanted():
    assert "query-key [OPTIONS] STORE... KEY\n" in re.sub(r" +\n", "\n", _help(["query-key"]))
    assert "query-queue [OPTIONS] STORE\n" in re.sub(r" +\n", "\n", _help(["query-queue"]))


def test_the_new_spellings_work():
    store = reference_store("basic")
    r = run_cli("query-key", store, "key-0011", "-n", "1", "-f", "jsonl")
    assert r.code == 0 and len(r.jsonl()) == 1, r.err
    r = run_cli("query-queue", store, "-t", "TopicTest", "-q", "1", "--offset", "0", "-n", "2", "-f", "jsonl")
    assert r.code == 0 and [x["cq_queue_offset"] for x in r.jsonl()] == [0, 1], r.err
    r = run_cli("dump", "commitlog", store, "-t", "TopicTest", "-n", "2", "-f", "jsonl")
    assert r.code == 0 and len(r.jsonl()) == 2, r.err


def test_the_old_spellings_still_work(tmp_path):
    store = reference_store("basic")
    new = run_cli("query-key", store, "key-0011", "--limit", "1", "-f", "jsonl")
    assert run_cli("query-key", store, "key-0011", "--max", "1", "-f", "jsonl").out == new.out != ""
    assert run_cli("query-key", store, "key-0011", "--max=1", "-f", "jsonl").out == new.out
    new = run_cli("query-queue", store, "--topic", "TopicTest", "--queue", "1", "--offset", "0", "--limit", "3",
                  "-f", "jsonl")
    old = run_cli("query-queue", store, "TopicTest", "1", "--offset", "0", "--count", "3", "-f", "jsonl")
    assert old.code == new.code == 0 and old.out == new.out != "", old.err
    r = run_cli("export", store, "--to", tmp_path / "x", "--format", "jsonl")
    assert r.code == 0 and (tmp_path / "x" / "_SUCCESS").exists(), r.err
    r = run_cli("verify", store, "--workers", "1", "-f", "json")
    assert r.code == 0, r.err


def test_query_queue_positional_and_option_must_agree():
    r = run_cli("query-queue", reference_store("basic"), "TopicTest", "1", "--queue", "2", "--offset", "0")
    assert r.code == 2 and "disagree" in r.err
    r = run_cli("query-queue", reference_store("basic"), "--offset", "0")
    assert r.code == 2 and "--topic" in r.err


def test_convert_to_is_now_into_with_a_note(tmp_path):
    import subprocess
    from pathlib import Path
    tarball = Path(reference_store("basic")).parent / "dledger.tar.gz"
    subprocess.run(["tar", "--sparse", "-xzf", str(tarball), "-C", str(tmp_path)], check=True)
    old = run_cli("convert", tmp_path / "dledger", "--to", "commitlog", "-o", tmp_path / "a", "-f", "json")
    assert old.code == 0 and "--into" in old.err, old.err
    new = run_cli("convert", tmp_path / "dledger", "--into", "commitlog", "-o", tmp_path / "b", "-f", "json")
    assert new.code == 0 and "--into" not in new.err, new.err


def test_jobs_has_one_default_and_its_rule_in_its_help():
    jobs = [(name, p) for name, cmd in _commands() for p in _options(cmd) if "--jobs" in p.opts]
    assert len(jobs) >= 10
    assert {(p.default, p.help, p.show_default) for _, p in jobs} == {(jobs[0][1].default, jobs[0][1].help, "auto")}
    assert "rebuild" in jobs[0][1].help and "0: one per CPU" in jobs[0][1].help
