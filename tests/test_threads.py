"""A thread count a caller names is bounded by the CPUs and applies only during its own call."""

from __future__ import annotations

import pytest

import ctxsel
from ctxsel.errors import InputError
from ctxsel.scoring.dense import DenseScorer
from ctxsel.threads import check_threads, max_threads, torch_threads
from ctxsel.types import Chunk

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2", max_threads() + 1, 10**6])
def test_a_thread_count_outside_one_to_the_cpus_is_refused(bad: object) -> None:
    with pytest.raises(InputError, match=r"must be a whole number from 1 to \d+ \(this machine's CPUs\)"):
        check_threads("threads", bad)  # type: ignore[arg-type]


def test_one_to_the_cpus_is_accepted_and_none_is_left_alone() -> None:
    assert [check_threads("t", n) for n in (1, max_threads(), None)] == [1, max_threads(), None]


def test_torch_threads_are_restored_after_the_block_even_when_it_fails() -> None:
    before = torch.get_num_threads()
    target = 2 if before == 1 else 1
    with pytest.raises(RuntimeError), torch_threads(target):
        assert torch.get_num_threads() == target
        raise RuntimeError("boom")
    assert torch.get_num_threads() == before


def test_ldar_threads_past_the_cpus_is_refused_naming_them() -> None:
    with pytest.raises(InputError, match=rf"threads must be <= {max_threads()} \(this machine's CPUs\)"):
        ctxsel.get_selector(f"ldar[threads={max_threads() + 1}]")


def test_ldar_threads_leave_the_process_count_as_it_was() -> None:
    before = torch.get_num_threads()
    sel = ctxsel.select("q", [f"chunk {i}" for i in range(40)], "ldar[threads=1]", scores=[i / 40 for i in range(40)])
    assert sel.k >= 1 and torch.get_num_threads() == before


@pytest.mark.parametrize("bad", [-1, max_threads() + 1])
def test_the_dense_scorers_thread_count_is_bounded_before_any_model_loads(bad: int) -> None:
    with pytest.raises(InputError, match="num_threads must be a whole number from 1"):
        DenseScorer(backend="torch", num_threads=bad)


@pytest.mark.model
def test_the_torch_dense_backend_sets_its_threads_only_while_it_encodes() -> None:
    before = torch.get_num_threads()
    other = 2 if before == 1 else 1
    scorer = DenseScorer(backend="torch", num_threads=min(other, max_threads()), cache=False)
    scores = scorer.score(
        "a heavy meteorite", [Chunk("0", "the meteorite weighs 3 kg"), Chunk("1", "parking is limited")]
    )
    assert scores[0] > scores[1] and torch.get_num_threads() == before
