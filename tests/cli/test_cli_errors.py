"""Bad input at the command line: one line on stderr, exit code 2, no traceback.

Each case goes through the real entry point (``ragprivacy.cli.main``, the console script's
function); ``main`` turns only ``RagPrivacyError`` into exit code 2, so any other
exception (a raw ``sqlite3`` or ``OSError``, a ``TypeError``) fails the test with its
traceback. A few cases also run as a subprocess.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import typer

import ragprivacy.audit.ledger_store as ledger_store
from ragprivacy.cli import main
from ragprivacy.cli.app import app
from ragprivacy.cli.attack_cmd import build_config
from ragprivacy.errors import ConfigError
from ragprivacy.eval import create_experiment, parse_config

SRC = Path(__file__).resolve().parents[2] / "src" / "ragprivacy"


def fails_cleanly(args: list[str], capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    """Run the CLI; check exit 2 and one line on stderr holding every needle."""
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    assert err.count("\n") == 0, err
    for needle in needles:
        assert needle in err, err
    return err


def write_config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


KNOWLEDGE = """
name: t
workers: 1
corpora:
  k: {synthetic: knowledge, n: 120}
models: {background_n: 40}
experiments:
"""


# ---------------------------------------------------------------- configs


def test_empty_epsilons(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(
        tmp_path, KNOWLEDGE + "  - {type: private_rag, corpus: k, systems: [rag], epsilons: []}"
    )
    fails_cleanly(["run", cfg, "--out", str(tmp_path / "o")], capsys, "'epsilons'", "empty")


@pytest.mark.parametrize(
    ("value", "kind"), [("1e8", "a string in YAML"), ("1.0e+8", "a float"), ("2.5", "")]
)
def test_float_where_an_integer_is_needed(
    value: str, kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_config(
        tmp_path,
        f"name: t\ncorpora:\n  k: {{synthetic: knowledge, n: {value}}}\n"
        "experiments:\n  - {type: qa, corpus: k}\n",
    )
    err = fails_cleanly(["run", cfg], capsys, "corpora.k.n: expected an integer", kind)
    if kind:
        assert "e.g. 100000000" in err


def test_float_count_in_experiment_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_config(tmp_path, "name: t\nexperiments:\n  - {type: collusion, n: 1e8}\n")
    fails_cleanly(["run", cfg, "--out", str(tmp_path / "o")], capsys, "experiments[0].n", "1e8")


def test_unknown_option_lists_the_entry_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_config(tmp_path, KNOWLEDGE + "  - {type: qa, corpus: k, question: 3}")
    err = fails_cleanly(["run", cfg, "--out", str(tmp_path / "o")], capsys, "did you mean")
    listed = set(err.split("expected one of ")[1].split(" (")[0].split(", "))
    assert listed == {"type", "corpus", "systems", "k", "options", "questions", "hops"}


def test_multihop_ablation_refuses_more_questions_than_chains(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_config(
        tmp_path,
        KNOWLEDGE + "  - {type: private_rag, corpus: k, systems: [rag], copies: 1, "
        "ablation: multihop, questions: 40}",
    )
    # n = 120 gives 6 chains: the run must not report 6 answers as a sample of 40
    fails_cleanly(
        ["run", cfg, "--out", str(tmp_path / "o"), "--no-progress"],
        capsys,
        "asks for 40 multi-hop questions",
        "has 6",
    )


@pytest.mark.parametrize(
    ("corpus", "needle"),
    [
        ("{synthetic: knowledge, path: x.jsonl}", "needs one of"),
        ("{path: x.jsonl, split: train}", "'split'"),
    ],
)
def test_corpus_sources(
    corpus: str, needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_config(
        tmp_path, f"name: t\ncorpora:\n  k: {corpus}\nexperiments:\n  - {{type: qa, corpus: k}}\n"
    )
    fails_cleanly(["run", cfg], capsys, needle)


def test_config_reads_a_public_dataset_file_directly(tmp_path: Path) -> None:
    records = [
        {"input": f"I have had a headache for {i} days.", "output": f"Rest and drink {i}."}
        for i in range(12)
    ]
    raw = tmp_path / "hcm.jsonl"
    raw.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    from ragprivacy.eval.context import load_corpus_spec

    config = parse_config(
        {
            "name": "t",
            "corpora": {"hcm": {"dataset": "healthcaremagic", "path": str(raw), "limit": 10}},
            "experiments": [{"type": "leakage", "corpus": "hcm"}],
        }
    )
    corpus = load_corpus_spec(config.corpora["hcm"], root_seed=0, name="hcm")
    assert len(corpus) == 10 and "headache for 3 days" in corpus[3].text


def test_system_names_match_between_config_kinds() -> None:
    """``private_rag`` names RAG over a private retriever by the retriever; the attack
    experiments accept the same name."""
    config = parse_config(
        {
            "name": "t",
            "corpora": {"m": {"synthetic": "medical", "n": 40}},
            "experiments": [
                {"type": "membership", "corpus": "m", "systems": ["noisy_topk", "rag"]}
            ],
        }
    )
    exp = create_experiment(config.experiments[0], config, 0)
    specs = {s.retriever: s.name for s in exp.systems.values()}  # type: ignore[attr-defined]
    assert specs == {"noisy_topk": "rag", "topk": "rag"}


# ---------------------------------------------------------------- corpus synth --out


def test_synth_out_is_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["corpus", "synth", "--kind", "medical", "--n", "5", "--out", str(tmp_path)]
    fails_cleanly(args, capsys, "is a directory")


def test_synth_out_under_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "f").write_text("x")
    out = str(tmp_path / "f" / "x.jsonl")
    args = ["corpus", "synth", "--kind", "medical", "--n", "5", "--out", out]
    fails_cleanly(args, capsys, "is a file, not a directory")


def test_synth_out_unwritable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if os.geteuid() == 0:  # root writes through permissions; /proc refuses new entries
        out = "/proc/ragprivacy-no-such/x.jsonl"
    else:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        out = str(locked / "x.jsonl")
    args = ["corpus", "synth", "--kind", "medical", "--n", "5", "--out", out]
    fails_cleanly(args, capsys, "Cannot write", "choose a writable path")
    assert not Path(out).exists()


SYNTH = ("corpus", "synth", "--kind", "email", "--n", "3")
POLICY = ("--eps", "4", "--delta", "1e-6", "--rate-limit", "5")


def test_synth_out_directory_as_a_subprocess(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ragprivacy", *SYNTH, "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "is a directory" in proc.stderr


# ---------------------------------------------------------------- SQLite stores


def test_state_store_is_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "state.sqlite").mkdir()
    fails_cleanly(["admin", "--state", str(tmp_path), "tenant", "list"], capsys, "is a directory")


def test_state_store_is_not_sqlite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "state.sqlite").write_bytes(b"not a database, just text\n" * 100)
    fails_cleanly(
        ["admin", "--state", str(tmp_path), "tenant", "list"],
        capsys,
        "cannot be opened as a SQLite store",
    )


def test_budget_store_on_a_directory_or_a_text_file(tmp_path: Path) -> None:
    from ragprivacy.dp import SqliteBudgetStore
    from ragprivacy.errors import RagPrivacyError

    (tmp_path / "dir.sqlite").mkdir()
    (tmp_path / "text.sqlite").write_text("hello\n" * 200)
    for name in ("dir.sqlite", "text.sqlite"):
        with pytest.raises(RagPrivacyError, match=re.escape(name)) as info:
            store = SqliteBudgetStore(tmp_path / name, capacity=1.0)
            store.spent(["a"])
        assert "\n" not in str(info.value)


def test_second_ledger_writer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = tmp_path / "docs.jsonl"
    state = ["admin", "--state", str(tmp_path / "st")]
    steps = [
        ["corpus", "synth", "--kind", "medical", "--n", "20", "--out", str(corpus)],
        [*state, "tenant", "create", "clinic", "--k", "3"],
        [*state, "docs", "add", "clinic", str(corpus)],
        [*state, "account", "create", "clinic", "a", *POLICY],
        [*state, "window", "open"],
    ]
    for step in steps:
        assert main(step) == 0, capsys.readouterr().err
    (ledger,) = (tmp_path / "st" / "ledgers").glob("*.sqlite")
    monkeypatch.setattr(ledger_store, "_WAIT_S", 0.2)
    other = sqlite3.connect(ledger, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process writing the ledger
    try:
        fails_cleanly([*state, "window", "close"], capsys, "locked by another writer")
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert main([*state, "window", "close"]) == 0, capsys.readouterr().err


# ---------------------------------------------------------------- option values


@pytest.mark.parametrize("eps", ["1,,2", "1,2,", ",", ""])
def test_empty_list_items_are_refused(eps: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["collusion", "sweep", "--eps", eps, "--k", "1", "--n", "10", "--trials", "10"]
    fails_cleanly(args, capsys, "no empty items", repr(eps))


def test_attack_takes_lists_like_eps() -> None:
    common = {
        "corpus": "medical",
        "n": 40,
        "targets": 10,
        "calibration": 4,
        "seed": 1,
        "k": 2,
        "compliance": 0.9,
        "workers": 1,
    }
    config = build_config(
        attacks=["mba,rag-mia", "srag"],
        defenses=["none,paraphrasing"],
        systems=["rag,noisy_topk", "{name: dp_vote, epsilon: 10}"],
        **common,
    )
    options = config.experiments[0].options
    assert options["attacks"] == ["mba", "rag-mia", "srag"]
    assert options["defenses"] == ["none", "paraphrasing"]
    assert options["system_specs"] == ["rag", "noisy_topk", {"name": "dp_vote", "epsilon": 10}]
    assert config.models.generator == "reference"


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--attack", "mba,,srag"], "empty name"),
        (["--attack", "mba,nope"], "Unknown attack 'nope'"),
        (["--defense", "none,nope"], "Unknown defense 'nope'"),
        (["--generator", "nope:x"], "Unknown --generator 'nope:x'"),
        (["--system", "{name: noisy_topk, retriever: threshold}"], "drop one of them"),
    ],
)
def test_attack_bad_values(
    extra: list[str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["attack", "--n", "40", "--targets", "4", "--calibration", "2", "--workers", "1"]
    fails_cleanly([*args, "--no-progress", "--out", str(tmp_path), *extra], capsys, needle)


def test_attack_generator_option_reaches_the_config() -> None:
    config = build_config(
        attacks=["mba"],
        corpus="medical",
        defenses=["none"],
        n=40,
        targets=10,
        calibration=4,
        seed=1,
        k=2,
        compliance=0.9,
        workers=1,
        generator="openai:gpt-4o-mini@http://127.0.0.1:9/v1",
    )
    assert config.models.generator.startswith("openai:")
    assert config.models.generator_options == {}  # compliance is the reference reader's


# ---------------------------------------------------------------- messages


def _cli_flags() -> set[str]:
    flags: set[str] = set()

    def walk(command: object) -> None:
        for param in getattr(command, "params", ()):
            flags.update(param.opts + param.secondary_opts)
        for sub in getattr(command, "commands", {}).values():
            walk(sub)

    walk(typer.main.get_command(app))
    return flags | {"--help"}  # click adds it to every command, outside ``params``


def test_messages_name_only_flags_that_exist() -> None:
    flags = _cli_flags()
    assert {"--eps", "--state", "--generator", "--path"} <= flags
    wrong = []
    for path in SRC.rglob("*.py"):
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", line):
                if flag not in flags:
                    wrong.append(f"{path.relative_to(SRC)}:{lineno}: {flag}")
    assert not wrong, f"text names command-line flags that do not exist: {wrong}"


def test_csv_without_text_column_names_no_missing_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "c.csv").write_text("id,body\n1,hello\n", encoding="utf-8")
    err = fails_cleanly(["corpus", "info", str(tmp_path / "c.csv")], capsys, "rename the column")
    assert "pass text_column=" not in err


def test_options_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["options", "private_rag"]) == 0
    out = capsys.readouterr().out
    assert "copies (integer, default 20)" in out and "question_set" in out
    fails_cleanly(["options", "nope"], capsys, "No config section 'nope'", "private_rag")
    with pytest.raises(ConfigError):
        build_config(
            attacks=["mba"],
            corpus="medical",
            defenses=["nope"],
            n=40,
            targets=10,
            calibration=4,
            seed=1,
            k=2,
            compliance=0.9,
            workers=1,
        )


def test_demo_real_model_without_smollm2_is_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import ragprivacy.generate as generate

    monkeypatch.setattr(generate, "smollm2_path", lambda package=None: None)  # not installed
    out = tmp_path / "demo"
    fails_cleanly(["demo", "--out", str(out), "--real-model"], capsys, "make realmodel")
    assert not out.exists()  # nothing ran


@pytest.mark.parametrize(
    ("extra", "needles"),
    [
        (["--system", "rgg"], ("got 'rgg'", "did you mean 'rag'?")),
        (["--corpus", "missing.jsonl"], ("--corpus missing.jsonl: no such file",)),
    ],
)
def test_a_refused_attack_says_what_was_meant_and_leaves_no_folder(
    extra: list[str], needles: tuple[str, ...], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    args = ["attack", "--n", "40", "--targets", "4", "--calibration", "2", "--workers", "1"]
    fails_cleanly([*args, "--no-progress", "--out", str(out), *extra], capsys, *needles)
    assert not out.exists()


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00", "is not UTF-8 text"),
        (b"a: [1\n", "not valid YAML: expected ',' or ']'"),
    ],
)
def test_a_config_that_is_not_yaml_is_one_line(
    content: bytes, needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "pic.png"
    config.write_bytes(content)
    fails_cleanly(["run", str(config), "--out", str(tmp_path / "out")], capsys, needle)
    assert not (tmp_path / "out").exists()


def test_version_short_help_and_a_path_the_system_refuses(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from importlib.metadata import version

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"ragprivacy {version('ragprivacy')}"
    for args in (["-h"], ["admin", "-h"], ["audit", "verify", "-h"]):
        assert main(args) == 0
        assert "Usage: ragprivacy" in capsys.readouterr().out
    fails_cleanly(["admin", "--state", "/proc/nope", "tenant", "list"], capsys, "/proc/nope")
