"""Many ranks in a few lines, and the lateness heat map at 1,024 ranks."""

from __future__ import annotations

import re

from gpuwise.records.alignment import JobAlignment
from gpuwise.report.ranks.heatmap import MAX_ROWS, lateness_heatmap
from gpuwise.report.ranks.text import alignment_lines, distribution, outliers, rank_figure_lines


def _rows(values: list[float]) -> list[dict[str, float | int]]:
    return [{"rank": i, "x": v} for i, v in enumerate(values)]


def test_distribution_ends_and_outliers():
    values = [1.0] * 30 + [1.1, 0.9, 5.0]
    assert distribution(values, str) == "min 0.9 · median 1.0 · p90 1.0 · max 5.0"
    assert outliers(_rows(values), "x") == [32]
    lines = rank_figure_lines(_rows(values), "x", "step", lambda v: f"{v:.1f}")
    assert lines[0] == "step over 33 ranks: min 0.9 · median 1.0 · p90 1.0 · max 5.0"
    assert lines[1].startswith("  highest: rank 32 5.0, rank 30 1.1, ")
    assert lines[1].endswith("lowest: rank 31 0.9, rank 0 1.0, rank 1 1.0")  # ties: lowest ranks
    assert lines[2] == "  outliers (high): 1 rank: 32"
    # a tenth of the largest distance is the floor: tiny waits beside a big one are not outliers
    assert outliers(_rows([0.0] * 20 + [1e-6, 2e-6, 1.0]), "x") == [22]
    assert outliers(_rows([1.0, 1.01, 0.99, 1.02, 0.98]), "x") == []


def _alignment(ranks: int, steps: int, late_rank: int) -> JobAlignment:
    grid = [[0.001 if r == late_rank else 0.0 for _ in range(steps)] for r in range(ranks)]
    per_rank = [
        {"rank": r, "node": f"n{r // 8}", "instances": steps, "last": steps * (r == late_rank),
         "wait_caused_s": 0.001 * steps * (r == late_rank), "waited_s": 0.0}
        for r in range(ranks)
    ]  # fmt: skip
    return JobAlignment(
        source="kernel",
        matching="sequence",
        instances=steps,
        unmatched=0,
        by_kind={"all_reduce": steps},
        per_rank=tuple(per_rank),
        step_numbers=tuple(range(1, steps + 1)),
        lateness_s=tuple(tuple(row) for row in grid),
        step_holders=tuple(
            {"step": s, "rank": late_rank, "wait_s": 0.001, "step_s": 0.01}
            for s in range(1, steps + 1)
        ),
    )


def test_heat_map_of_1024_ranks_bins_rows_and_keeps_the_late_one_red():
    svg = lateness_heatmap(_alignment(1024, 8, late_rank=700))
    cells = re.findall(r'<rect class="late"[^>]* y="(\d+)"[^>]*fill="(#[0-9a-f]{6})"', svg)
    assert len(cells) == MAX_ROWS * 8  # 4 ranks a row
    red_rows = {y for y, fill in cells if fill == "#d62728"}
    assert len(red_rows) == 1  # ranks 700-703 share the row, which shows the latest of them
    assert "late</title>" in svg  # 2,048 cells: each still carries its hover title
    assert "700-703" in svg


def test_heat_map_of_a_few_ranks_has_titles():
    svg = lateness_heatmap(_alignment(8, 4, late_rank=3))
    assert "<title>rank 3, step 2: 1.000 ms late</title>" in svg
    assert svg.count('class="late"') == 32


def test_alignment_lines_past_16_ranks_summarize():
    pairs = alignment_lines(_alignment(64, 4, late_rank=41))
    lines = dict(pairs)
    assert lines["collectives"].startswith("4 instances matched across 64 ranks by sequence")
    assert lines["held back"].startswith("steps held back most by: rank 41 4 of 4")
    lateness = [text for label, text in pairs if label == "lateness"]
    assert lateness[0].startswith("wait caused over 64 ranks: min 0 s · median 0 s")
    assert lateness[1].startswith("  highest: rank 41 4.0 ms, rank 0 0 s")
    assert lateness[2] == "  outliers (high): 1 rank: 41"


def test_heat_map_row_labels_of_1024_ranks_are_whole_and_fit_the_margin():
    svg = lateness_heatmap(_alignment(1024, 8, late_rank=700))
    ticks = re.findall(
        r'<text x="(\d+)" y="\d+" class="tick" text-anchor="end">([^<]*)</text>', svg
    )
    labels = [label for _, label in ticks]
    assert labels[0] == "0-3"  # was "s 0-3": the prefix cut off "ranks "
    assert all(re.fullmatch(r"\d+-\d+", label) for label in labels)
    right = int(ticks[0][0])  # labels end here; 7 px a character at most must fit
    assert right >= 7 * max(len(label) for label in labels)
    few = lateness_heatmap(_alignment(8, 4, late_rank=3))
    assert '<text x="60" y="40" class="tick" text-anchor="end">0</text>' in few
