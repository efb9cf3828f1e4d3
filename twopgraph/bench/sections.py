"""A benchmark's own lines in its section of docs/benchmarks.md, beside the table every
benchmark gets (:mod:`twopgraph.bench.report`): lines above each file's table
(:data:`SECTION_LEADS`: ``bench tta``'s summary over the seeds) and under it
(:data:`SECTION_EXTRAS`: ``bench defaults``' leave-one-out table)."""

from __future__ import annotations


def defaults_lines(records: list[dict]) -> list[str]:
    """``bench defaults``' leave-one-out table (:func:`twopgraph.bench.defaults.loo_lines`)."""
    from twopgraph.bench.defaults import loo_lines
    return ["", *loo_lines(records)]


def tta_lines(records: list[dict]) -> list[str]:
    """``bench tta``'s table over the seeds (:func:`twopgraph.bench.tta.summary_lines`), then
    a heading for the per-seed rows under it."""
    from twopgraph.bench.tta import summary_lines
    lines = summary_lines(records)
    return [*lines, "Per seed:", ""] if lines else []


#: ``{benchmark: renderer}``: lines a benchmark's section shows under each file's table
SECTION_EXTRAS = {"defaults": defaults_lines}
#: ``{benchmark: renderer}``: lines a benchmark's section shows above each file's table
SECTION_LEADS = {"tta": tta_lines}


def section_lead(benchmark: str, records: list[dict]) -> list[str]:
    """The :data:`SECTION_LEADS` lines of one file's records (``[]`` for most benchmarks)."""
    render = SECTION_LEADS.get(benchmark)
    return render(records) if render is not None else []


def section_extra(benchmark: str, records: list[dict]) -> list[str]:
    """The :data:`SECTION_EXTRAS` lines of one file's records (``[]`` for most benchmarks)."""
    render = SECTION_EXTRAS.get(benchmark)
    return render(records) if render is not None else []
