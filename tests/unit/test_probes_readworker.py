"""The process probe's reading thread (probes/readworker.py): it stays between reads, hands
back results and errors, and a thread given up on closes its state once it wakes up. Each
wait is on an Event the test sets, never on a sleep."""

from __future__ import annotations

import threading

import pytest

from llmtop.probes.readworker import ReadWorker


class State:
    def __init__(self) -> None:
        self.closed = threading.Event()
        self.threads: set[int] = set()

    def close(self) -> None:
        self.closed.set()


def test_reads_run_on_one_thread_that_stays() -> None:
    state = State()
    worker = ReadWorker(state)

    def read(st: State, current: list[int]) -> int:
        st.threads.add(threading.get_ident())
        return len(st.threads)

    assert worker.run(read, 5.0) == (True, 1)
    assert worker.run(read, 5.0) == (True, 1)  # the same thread both times
    assert threading.get_ident() not in state.threads
    worker.retire()
    assert state.closed.wait(5.0)


def test_an_error_is_raised_in_the_caller() -> None:
    worker = ReadWorker(State())

    def fail(st: State, current: list[int]) -> None:
        raise ValueError("bad table")

    with pytest.raises(ValueError, match="bad table"):
        worker.run(fail, 5.0)
    worker.retire()


def test_a_hung_read_times_out_and_its_thread_closes_its_state_when_it_wakes() -> None:
    state, gate = State(), threading.Event()
    worker = ReadWorker(state)

    def hang(st: State, current: list[int]) -> None:
        current[0] = 66
        gate.wait()

    assert worker.run(hang, 0.05) == (False, None)
    assert worker.current == [66]  # the pid it is stuck on, for the message
    worker.retire()
    assert not state.closed.is_set()  # still stuck: it owns its state until it wakes
    gate.set()
    assert state.closed.wait(5.0)
