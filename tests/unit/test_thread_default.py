"""The embedded engine's default thread count, and the header that says it (issue 32, row 8
and partial 15: "the default num_thread is never stated"; the standards' containers with CPU
quotas and `taskset`)."""

from __future__ import annotations

from llmtop.engines.connection import describe_config
from llmtop.servers.embedded.llama_backend import ThreadDefault, default_threads


def test_the_physical_cores_on_a_plain_machine() -> None:
    # 8 physical cores, all 16 logical CPUs in the affinity mask, no quota: llama.cpp's own
    assert default_threads(8, 16, None, look=False) == ThreadDefault(8, "the physical cores")


def test_a_container_quota_is_the_limit() -> None:
    # docker --cpus=6.5 on a 16-core host: 16 threads would be throttled in turn; 6.5 → 6
    chosen = default_threads(16, 32, 6.5, look=False)
    assert chosen == ThreadDefault(6, "the container's CPU quota (6.5 CPUs)")
    assert chosen.describe() == "6 threads (the container's CPU quota (6.5 CPUs))"
    # a quota under one CPU still runs one thread
    assert default_threads(16, 32, 0.5, look=False).threads == 1


def test_taskset_is_the_limit() -> None:
    # taskset -c 0-5 on an 8-core machine
    assert default_threads(8, 6, None, look=False) == ThreadDefault(
        6, "the CPUs this process may run on (affinity)")


def test_a_small_machine_leaves_one_cpu_to_the_neighbours() -> None:
    # 2 cores (bench/thread_contention.py --neighbour: 2 threads 0.40 of quiet beside a busy
    # process, 1 thread 0.96): one fewer than the CPUs, from 2 up to FEW_CORES (4)
    assert default_threads(2, 2, None, look=False) == ThreadDefault(
        1, "one fewer than the physical cores, 2: a busy neighbour would stall a thread on "
           "every core")
    assert default_threads(4, 8, None, look=False).threads == 3
    assert default_threads(16, 32, 2.5, look=False).threads == 1  # a 2-CPU quota: 2 − 1
    assert default_threads(5, 8, None, look=False).threads == 5  # above FEW_CORES: all
    assert default_threads(1, 1, None, look=False).threads == 1  # one CPU: one thread


def test_a_tie_names_the_physical_cores() -> None:
    assert default_threads(6, 6, 6.0, look=False).why == "the physical cores"


def test_this_machine_answers_within_its_cpus() -> None:
    import os

    chosen = default_threads()
    assert 1 <= chosen.threads <= (os.cpu_count() or 1)


def test_the_header_states_the_thread_count() -> None:
    cfg = {"use_extra_bufts": True, "source": "self-test", "threads": 2}
    assert describe_config(cfg) == "llama.cpp repack on · 2 threads"
    assert describe_config({**cfg, "threads": 1}) == "llama.cpp repack on · 1 thread"
    killed = {**cfg, "use_extra_bufts": False, "trials": [{"config": "repack", "signal": 11}]}
    assert describe_config(killed) == "llama.cpp repack off: repack killed by SIGSEGV · 2 threads"
    # an older engine's /api/version without the field: as before
    assert describe_config({"use_extra_bufts": False}) == "llama.cpp repack off"
