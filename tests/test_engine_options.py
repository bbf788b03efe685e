"""Every command that walks a CommitLog takes the same engine options, declared once in
``rmqtool.cli.common`` (read here from the typer app), and each option works on each command:
a non-default engine gives the answer of the default one."""
from __future__ import annotations

import json
import re

import pytest
import typer

from conftest import reference_store, run_cli

#: the options of where a CommitLog walk runs, and the ``cli.common`` declaration of each
ENGINE_OPTIONS = {"--engine": "EngineOpt", "--jobs": "JobsOpt", "--master": "MasterOpt", "--remote": "RemoteOpt",
                  "--spark-conf": "SparkConfOpt", "--split-size": "SplitOpt", "--staging": "StagingOpt"}
#: every command that walks a CommitLog (``rebuild timerwheel`` walks the timer log: not listed)
WALKING_COMMANDS = [("verify",), ("export",), ("stats",), ("report",), ("query-key",), ("query-id",),
                    ("rebuild", "consumequeue"), ("rebuild", "batchconsumequeue"), ("rebuild", "index"),
                    ("rebuild", "all")]
#: the commands of this list that run through ``cli.common.engine_from_options`` in-process here
PLAIN = [c for c in WALKING_COMMANDS if c[0] != "rebuild"]


def _command(path: tuple[str, ...]):
    from rmqtool.cli import load_commands
    from rmqtool.cli.common import app
    load_commands([])
    cmd = typer.main.get_command(app)
    for name in path:
        cmd = cmd.commands[name]
    return cmd


def _spelling(param) -> dict:
    return {"names": sorted(param.opts + param.secondary_opts), "default": param.default, "help": param.help,
            "type": str(param.type), "multiple": param.multiple, "metavar": param.metavar}


def _declared(option: str) -> dict:
    """How ``cli.common`` declares ``option`` (the typer OptionInfo every command uses)."""
    from rmqtool.cli import common
    info = getattr(common, ENGINE_OPTIONS[option])
    return {"names": sorted(info.param_decls), "default": info.default, "help": info.help}


@pytest.mark.parametrize("path", WALKING_COMMANDS, ids=" ".join)
def test_every_walking_command_takes_the_engine_options_as_declared(path):
    params = [p for p in _command(path).params
              if p.param_type_name == "option" and set(p.opts) & set(ENGINE_OPTIONS)]
    got = {next(o for o in p.opts if o in ENGINE_OPTIONS): _spelling(p) for p in params}
    assert sorted(got) == sorted(ENGINE_OPTIONS), f"{' '.join(path)}: engine options {sorted(got)}"
    for option, spelling in got.items():
        want = _declared(option)
        assert (spelling["names"], spelling["default"], spelling["help"]) == \
            (want["names"], want["default"], want["help"]), f"{' '.join(path)} {option}"


def test_the_engine_options_are_spelled_the_same_on_every_walking_command():
    reference = {o: s for o, s in ((next(x for x in p.opts if x in ENGINE_OPTIONS), _spelling(p))
                                   for p in _command(("verify",)).params if set(p.opts) & set(ENGINE_OPTIONS))}
    for path in WALKING_COMMANDS[1:]:
        got = {next(x for x in p.opts if x in ENGINE_OPTIONS): _spelling(p)
               for p in _command(path).params if set(p.opts) & set(ENGINE_OPTIONS)}
        assert got == reference, " ".join(path)


def test_jobs_defaults_to_the_commands_fastest_local_way():
    """--jobs not given: None, shown as auto (rebuild: one process per CPU; the others walk in this
    process); --workers is its old name, hidden."""
    from rmqtool.cli.common import JobsOpt
    assert JobsOpt.default is None and JobsOpt.show_default == "auto"
    assert "--workers" not in _spelling(next(p for p in _command(("verify",)).params if p.name == "jobs"))["names"]


@pytest.mark.parametrize("path", PLAIN, ids=" ".join)
@pytest.mark.parametrize("option, value, message", [("--jobs", "-1", "--jobs must be 0 (one per CPU) or positive"),
                                                    ("--split-size", "0", "--split-size must be positive"),
                                                    ("--engine", "yarn", "--engine must be one of local, spark")])
def test_bad_engine_options_are_usage_errors_on_every_command(path, option, value, message, tmp_path):
    store = reference_store("basic")
    args = {"verify": [store], "export": [store, "--to", tmp_path / "x"], "stats": [store],
            "report": [store, "-o", tmp_path / "r.html"], "query-key": [store, "k", "--scan"],
            "query-id": [store, "0A0000010000000000000000", "--scan"]}[path[0]]
    r = run_cli(*path, *args, option, value)
    assert r.code == 2 and message in r.err, (r.code, r.err)
    assert not (tmp_path / "x").exists() and not (tmp_path / "r.html").exists()


def _json(r) -> object:
    assert r.code in (0, 1), r.err
    doc = json.loads(r.out)
    for rep in doc.get("reports", [doc]) if isinstance(doc, dict) else ():
        rep.get("summary", {}).pop("seconds", None)
    return doc


def test_verify_a_fleet_through_the_pool_by_its_old_option_name():
    stores = [reference_store("crashed"), reference_store("basic")]
    want = _json(run_cli("verify", *stores, "--level", "deep", "-f", "json"))
    got = _json(run_cli("verify", *stores, "--level", "deep", "-f", "json", "--workers", "2", "--split-size", "7000"))
    assert got == want and len(got["reports"]) == 2


def _exported(path) -> list:
    return sorted((json.loads(line) for f in sorted(path.rglob("*.jsonl")) for line in f.read_text().splitlines()
                   if line), key=lambda r: r["phy_offset"])


def test_export_through_the_pool_with_staging(tmp_path):
    store = reference_store("crashed")
    assert run_cli("export", store, "--to", tmp_path / "a", "--format", "jsonl").code == 0
    (tmp_path / "staging").mkdir()
    r = run_cli("export", store, "--to", tmp_path / "b", "--format", "jsonl", "--jobs", "2", "--split-size", "7000",
                "--staging", tmp_path / "staging")
    assert r.code == 0, r.err
    assert _exported(tmp_path / "b") == _exported(tmp_path / "a") != []


def test_stats_through_the_pool_with_staging(tmp_path):
    store = reference_store("crashed")
    want = run_cli("stats", store, "--by", "minute", "-f", "json")
    got = run_cli("stats", store, "--by", "minute", "-f", "json", "--jobs", "0", "--split-size", "5000",
                  "--staging", tmp_path)
    assert got.code == want.code == 0, got.err
    assert json.loads(got.out) == json.loads(want.out) != []


def test_stats_on_spark_gives_the_local_answer(tmp_path):
    pytest.importorskip("pyspark")
    from rmqtool.engines.spark import find_java
    if find_java() is None:
        pytest.skip("no Java for Spark (JAVA_HOME or java on PATH)")
    store = reference_store("crashed")
    want = run_cli("stats", store, "-f", "json")
    got = run_cli("stats", store, "-f", "json", "--engine", "spark", "--master", "local[1]", "--split-size", "7000",
                  "--staging", tmp_path)
    assert got.code == want.code == 0, got.err
    assert json.loads(got.out) == json.loads(want.out)


def _page(path) -> str:
    """The report without what names its making (the time and the command line)."""
    return re.sub(r'<dl class="meta">\s*<dt>generated</dt>.*?</dl>', "", path.read_text(), flags=re.S)


def test_report_through_the_pool(tmp_path):
    store = reference_store("crashed")
    assert run_cli("report", store, "-o", tmp_path / "a.html").code == 0
    r = run_cli("report", store, "-o", tmp_path / "b.html", "--jobs", "2", "--split-size", "7000")
    assert r.code == 0, r.err
    assert _page(tmp_path / "b.html") == _page(tmp_path / "a.html")


def test_query_key_scan_through_the_pool():
    store = reference_store("basic")
    key = "key-0017"
    want = run_cli("query-key", store, key, "--scan", "-f", "json")
    got = run_cli("query-key", store, key, "--scan", "-f", "json", "--jobs", "2", "--split-size", "7000")
    assert got.code == want.code == 0, got.err
    assert json.loads(got.out) == json.loads(want.out) != []


def test_query_key_engine_without_scan_is_a_usage_error():
    r = run_cli("query-key", reference_store("basic"), "k", "--jobs", "2")
    assert r.code == 2 and "add --scan" in r.err


def test_query_id_scan_through_the_pool():
    store = reference_store("basic")
    uniq = next(r["properties"]["UNIQ_KEY"] for r in run_cli("dump", "commitlog", store, "-f", "jsonl").jsonl()
                if "UNIQ_KEY" in r.get("properties", {}))
    want = run_cli("query-id", store, uniq, "--scan", "-f", "json")
    got = run_cli("query-id", store, uniq, "--scan", "-f", "json", "--jobs", "2", "--split-size", "7000")
    assert got.code == want.code == 0, got.err
    assert json.loads(got.out) == json.loads(want.out)
    assert json.loads(got.out)[0]["records"]


def test_rebuild_all_through_the_pool(tmp_path):
    """Wired by the rebuild part of issue 34: the same files through the local pool's small tasks."""
    store = reference_store("basic")
    a = run_cli("rebuild", "all", store, "--output", tmp_path / "a", "-f", "json")
    b = run_cli("rebuild", "all", store, "--output", tmp_path / "b", "-f", "json", "--engine", "local", "--jobs", "2",
                "--split-size", "7000")
    assert a.code == b.code == 0, b.err
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file()
                   and "index" not in p.parts)
    assert files
    for f in files:
        assert (tmp_path / "b" / f).read_bytes() == (tmp_path / "a" / f).read_bytes(), f


def _imports(path) -> set[str]:
    """Every module a file imports, at its top or inside functions."""
    import ast
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_engines_import_no_operation():
    """engines/ is the executor: an operation's stages live with the operation (after the rebuild part
    of issue 34 is merged, engines/rebuild.py too)."""
    from conftest import ROOT
    wrong = {f.name: sorted(m for m in _imports(f) if m.startswith("rmqtool.ops"))
             for f in sorted((ROOT / "rmqtool" / "engines").glob("*.py"))}
    assert {k: v for k, v in wrong.items() if v} == {}


def test_no_command_chooses_its_engine():
    """Commands take ``engine=`` from ``cli.common.engine_from_options``; none imports engines/."""
    from conftest import ROOT
    wrong = {f.name: sorted(m for m in _imports(f) if m.startswith("rmqtool.engines"))
             for f in sorted((ROOT / "rmqtool" / "cli").glob("cmd_*.py"))}
    assert {k: v for k, v in wrong.items() if v} == {}
