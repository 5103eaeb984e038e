"""``--config FILE`` (ctxsel.cli.config_file): a TOML file of long options under the command line."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

import pytest

from ctxsel.cli.config_file import ConfigArgumentParser, add_config_argument
from ctxsel.cli.main import build_parser, main
from tests.support.paths import REPO

EXPERIMENTS = sorted((REPO / "experiments").glob("*.toml"))


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "run.toml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_the_file_gives_the_options(tmp_path: Path) -> None:
    cfg = write(
        tmp_path,
        'dataset = "example"\noutput = "runs/x"\nmethods = ["top-k@1", "full"]\nlimit = 3\n'
        "overwrite = true\nno_progress = false\nn-ctx = 4096\n",
    )
    args = parse("eval", "--config", cfg)
    assert (args.dataset, args.output, args.methods, args.limit) == ("example", "runs/x", "top-k@1,full", 3)
    assert args.overwrite is True and args.no_progress is False
    assert args.n_ctx == 4096 and args.config == cfg


def test_the_command_line_wins_over_the_file(tmp_path: Path) -> None:
    cfg = write(tmp_path, 'dataset = "example"\noutput = "runs/x"\nlimit = 3\nmethods = "full"\n')
    args = parse("eval", "--limit", "1", "--config", cfg, "--method=top-k@2")
    assert (args.limit, args.methods, args.dataset) == (1, "top-k@2", "example")


def test_a_command_without_config_refuses_it(tmp_path: Path) -> None:
    cfg = write(tmp_path, 'question = "q"\n')
    with pytest.raises(SystemExit):
        parse("answer", "--config", cfg)


def test_a_repeated_option_is_taken_from_one_place(tmp_path: Path) -> None:
    p = ConfigArgumentParser(prog="t")
    add_config_argument(p)
    p.add_argument("--tag", action="append")
    p.add_argument("--sizes", nargs="+", type=int)
    cfg = write(tmp_path, 'tag = ["a", "b"]\nsizes = [1, 2]\n')
    assert p.parse_args(["--config", cfg]).tag == ["a", "b"]
    assert p.parse_args(["--config", cfg]).sizes == [1, 2]
    assert p.parse_args(["--config", cfg, "--tag", "c"]).tag == ["c"]


def test_the_values_pass_through_the_options_types(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write(tmp_path, 'dataset = "example"\noutput = "runs/x"\nlimit = 0\n')
    with pytest.raises(SystemExit) as e:
        parse("eval", "--config", cfg)
    assert e.value.code == 2
    assert "--limit" in capsys.readouterr().err


def test_train_reads_its_positional_from_the_file(tmp_path: Path) -> None:
    cfg = write(tmp_path, 'method = "picker"\ndataset = "hotpotqa-long"\noutput = "runs/p"\nlabels = true\n')
    args = parse("train", "--config", cfg, "--stage-seconds", "5")
    assert (args.method, args.labels, args.stage_seconds) == ("picker", True, 5.0)
    assert parse("train", "ldar", "--config", cfg).method == "ldar"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('dataset = "example"\nmethodz = "full"\n', "unknown key 'methodz' in {path} (not an option of `ctxsel eval`)"),
        ('dataset = "example\n', "--config: {path} is not valid TOML: "),
        ('config = "other.toml"\n', "unknown key 'config' in {path}"),
        ("overwrite = 1\n", "key 'overwrite' in {path}: --overwrite is a flag, give true or false"),
        ("[eval]\nlimit = 1\n", "key 'eval' in {path}: a table is not an option value"),
    ],
)
def test_a_bad_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str) -> None:
    cfg = write(tmp_path, text)
    with pytest.raises(SystemExit) as e:
        main(["eval", "--config", cfg, "--output", "x"])
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert err.startswith("ctxsel eval: error: " + message.format(path=cfg))
    assert err.count("\n") == 1


def test_a_missing_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["train", "ldar", "--config", str(tmp_path / "nope.toml")])
    assert e.value.code == 2
    assert capsys.readouterr().err == f"ctxsel train: error: --config: no such file: {tmp_path / 'nope.toml'}\n"


def command_of(path: Path) -> list[str]:
    """The command a config's first comment names (``# ctxsel eval --config experiments/NAME.toml``)."""
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("# ctxsel "), f"{path.name}: the first line names the command that runs it"
    words = shlex.split(first[2:])
    assert words[-2:] == ["--config", f"experiments/{path.name}"], path.name
    return words[1:]


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.name)
def test_every_experiment_config_parses(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    args = parse(*command_of(path))
    assert args.command in ("eval", "train")
    assert Path(args.output).name == path.stem, "a config's output folder is named like the config"


def test_the_experiments_are_found() -> None:
    assert len(EXPERIMENTS) >= 5


def test_a_config_parses_as_the_command_it_replaces(monkeypatch: pytest.MonkeyPatch) -> None:
    """experiments/hotpotqa_long_intervals.toml is the command its results file records, output folder aside."""
    monkeypatch.chdir(REPO)
    report = (REPO / "benchmarks" / "results" / "hotpotqa_long_intervals.md").read_text(encoding="utf-8")
    command = shlex.split(report.split("Command: `", 1)[1].split("`", 1)[0])
    assert command[:2] == ["ctxsel", "eval"]
    by_hand = vars(parse(*command[1:], "--output", "runs/hotpotqa_long_intervals"))
    by_config = vars(parse("eval", "--config", "experiments/hotpotqa_long_intervals.toml"))
    assert by_config.pop("config") == "experiments/hotpotqa_long_intervals.toml"
    assert by_hand.pop("config") is None
    assert by_config == by_hand
