"""CLI flags generated from config dataclasses: one place for a setting's type, default and help."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from typing import Literal

import pytest

from ctxsel.cli.dataclass_args import add_dataclass_arguments, from_args
from ctxsel.cli.main import build_parser
from ctxsel.cli.mine_cmd import MINE_FLAGS
from ctxsel.cli.train_context_picker_cmd import PICKER_FLAGS
from ctxsel.cli.train_ldar_cmd import NETWORK_FLAGS, TRAIN_FLAGS


@dataclass
class Toy:
    steps: int = field(default=5, metadata={"help": "how many"})
    rate: float = field(default=0.5, metadata={"flag": "--toy-rate", "help": "how fast"})
    mode: Literal["a", "b"] = field(default="a", metadata={"help": "which"})
    fast: bool = field(default=False, metadata={"help": "go fast"})
    snap: bool = field(default=True, metadata={"help": "do not snap"})


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    add_dataclass_arguments(p, Toy, ["steps", "rate", "mode", "fast", "snap"])
    return p


def test_defaults_round_trip() -> None:
    assert from_args(Toy, parser().parse_args([]), ["steps", "rate", "mode", "fast", "snap"]) == Toy()


def test_flags_types_choices_and_switches() -> None:
    args = parser().parse_args(["--steps", "7", "--toy-rate", "0.25", "--mode", "b", "--fast", "--no-snap"])
    assert from_args(Toy, args, ["steps", "rate", "mode", "fast", "snap"]) == Toy(7, 0.25, "b", True, False)
    with pytest.raises(SystemExit):
        parser().parse_args(["--mode", "c"])
    assert "how many (default 5)" in parser().format_help()


def test_an_unknown_field_is_an_error() -> None:
    with pytest.raises(AttributeError, match="no field"):
        add_dataclass_arguments(argparse.ArgumentParser(), Toy, ["nope"])


def _defaults(cls: type, names: list[str]) -> dict[str, object]:
    return {f.name: f.default for f in dataclasses.fields(cls) if f.name in names}


def test_the_training_and_mining_commands_take_their_defaults_from_the_configs() -> None:
    from ctxsel.selectors.ldar.config import PolicyConfig
    from ctxsel.train.context_picker.config import PickerTrainConfig
    from ctxsel.train.context_picker.mining import MineConfig
    from ctxsel.train.ldar.config import TrainConfig

    args = build_parser().parse_args(["train", "ldar", "--dataset", "example", "--output", "x"])
    assert from_args(TrainConfig, args, TRAIN_FLAGS) == TrainConfig()
    assert from_args(PolicyConfig, args, NETWORK_FLAGS) == PolicyConfig()
    assert from_args(PickerTrainConfig, args, PICKER_FLAGS) == PickerTrainConfig()
    args = build_parser().parse_args(["mine", "--dataset", "example", "--output", "x", "--reader", "local"])
    assert from_args(MineConfig, args, MINE_FLAGS) == MineConfig()
    # the flag names users know stay the same
    args = build_parser().parse_args(
        [
            "train",
            "picker",
            "--dataset",
            "d",
            "--output",
            "o",
            "--group-size",
            "4",
            "--picker-lr",
            "0.001",
            "--no-snap-top",
            "--steps",
            "3",
        ]
    )
    assert from_args(PickerTrainConfig, args, PICKER_FLAGS).num_generations == 4
    assert from_args(TrainConfig, args, TRAIN_FLAGS) == TrainConfig(steps=3, snap_top=False)
