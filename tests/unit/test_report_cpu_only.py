"""A model that runs wholly on the CPU (Ollama's /api/ps: size_vram 0) is said so in the run
report, not shown as a bare "0 B" of VRAM (new-user pass D31)."""

from __future__ import annotations

from pathlib import Path

from llmtop.sessions.records.log import read_log
from llmtop.sessions.reports.formats import render
from llmtop.sessions.reports.run import build
from tests.unit.compare_logs import write_log


def with_placement(tmp_path: Path, size_vram: int) -> str:
    path = write_log(tmp_path / "b.jsonl", [100.0] * 12)
    with path.open("a") as f:  # an end environment as runners/environment.py writes it
        f.write('{"type": "environment", "phase": "end", "loaded": {"name": "gemma3:270m", '
                f'"size": 291000000, "size_vram": {size_vram}}}}}\n')
    return render(build(read_log(path)), "md")


def test_size_vram_zero_reads_as_the_cpu(tmp_path: Path) -> None:
    md = with_placement(tmp_path, 0)
    # 291,000,000 B / 2^20 = 277.52 → "277.5 MiB" (reports/text.size: binary units)
    assert "| none: the model runs on the CPU (0 of 277.5 MiB, /api/ps) |" in md
    assert "| size 277.5 MiB, size_vram 0 B (all in RAM: the model runs on the CPU) |" in md


def test_a_model_in_vram_keeps_its_figures(tmp_path: Path) -> None:
    md = with_placement(tmp_path, 291000000)
    assert "| 277.5 MiB of 277.5 MiB (/api/ps) |" in md and "runs on the CPU" not in md
