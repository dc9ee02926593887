from __future__ import annotations

from pathlib import Path

import pytest

from ragprivacy.errors import ConfigError, DataError
from ragprivacy.eval import load_config, parse_config

GOOD = {
    "name": "t",
    "seed": 3,
    "corpora": {"k": {"synthetic": "knowledge", "n": 30}},
    "experiments": [{"type": "qa", "corpus": "k", "questions": 10, "hops": [1]}],
}


def test_parse_good_config_keeps_type_options() -> None:
    cfg = parse_config(GOOD)
    assert cfg.seed == 3 and cfg.corpora["k"].n == 30
    assert cfg.experiments[0].options == {"questions": 10, "hops": [1]}
    assert cfg.to_dict()["experiments"][0]["systems"] == ["non-rag", "rag"]


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"corpora": {"k": {"synthetic": "knowledge", "m": 1}}}, r"corpora\.k\.m: unknown key"),
        ({"corpora": {"k": {"synthetic": "knowledge", "n": "x"}}}, "expected an integer"),
        ({"corpora": {"k": {"n": 5}}}, "needs one of"),
        ({"seed": -1}, "'seed' parameter"),
        ({"workers": 0}, "'workers' parameter"),
        ({"experiments": []}, "no experiments"),
        ({"experiments": [{"type": "qa", "corpus": "zzz"}]}, "does not define"),
        ({"bogus": 1}, r"config\.bogus: unknown key"),
    ],
)
def test_bad_configs_are_refused_with_the_key_path(patch: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config({**GOOD, **patch})


def test_load_config_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    with pytest.raises(ConfigError, match="empty"):
        load_config(empty)


def test_shipped_demo_config_parses() -> None:
    cfg = load_config(Path(__file__).resolve().parents[2] / "configs" / "demo.yaml")
    assert {"qa", "leakage"} <= {e.type for e in cfg.experiments}
