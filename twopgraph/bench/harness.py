"""The benchmark harness: ``twopgraph bench NAME`` (or ``python -m twopgraph.bench NAME``) runs
the benchmark ``NAME`` with the options every benchmark shares, and writes its records.

Shared options (on every benchmark, beside its own):

- ``--graph G`` (alias ``--dataset``): the graph, a dataset name as ``--dataset`` takes it
  (``synthetic-small``, ``cora`` found in the data root or ``$TWOPGRAPH_DATASET_PATH``, a
  ``.npz`` path, a store folder) or a generated family (:mod:`twopgraph.bench.families`:
  ``rmat:16:8``, ``rgg:100000:12``, ``ba:100000:6``, ``scaled:100k``); ``--data-root``;
- ``--repeat N``: the measurement runs N times; every figure is reported as the median of the
  N, with its spread (min, max);
- ``--json OUT``: append the records to ``OUT``, one JSON line per measured row
  (:mod:`twopgraph.bench.record`: benchmark, params, figures, spread, machine, versions,
  commit); ``--json`` alone prints them on stdout instead of the table (``bench sampler`` and
  ``bench cache``: their own JSON, as always).

A benchmark is one module of this package holding a :class:`Benchmark` subclass registered
with ``@BENCHMARKS.register("name")`` (:data:`BENCHMARKS`, a
:class:`~twopgraph.core.registry.Registry`: a new module is found without being listed
anywhere). Its module imports neither torch nor numba at the top: every ``twopgraph`` command
builds the benchmarks' parsers. The class gives its flags (:meth:`Benchmark.add_arguments`),
checks them before anything long runs (:meth:`Benchmark.check`), measures once
(:meth:`Benchmark.measure`: a list of :class:`Row`), and may write files
(:meth:`Benchmark.finish`) and print its own table (:meth:`Benchmark.show`).

Bad input (an unknown ``--graph``, a bad flag) is one line ``twopgraph: error: ...`` and exit
code 2, as for every verb.

Example::

    twopgraph bench sampling --graph synthetic-tiny --repeat 3 --json runs/bench.jsonl
"""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from twopgraph.bench.record import append_jsonl, dumps, is_number, make_record
from twopgraph.core.registry import Registry
from twopgraph.errors import ConfigError, Stopped, TwopgraphError

if TYPE_CHECKING:
    from twopgraph.graph.data import GraphData

log = logging.getLogger("twopgraph")

#: ``name -> Benchmark subclass``; every module of :mod:`twopgraph.bench` registering one
BENCHMARKS = Registry("benchmark", "twopgraph.bench", "BENCHMARKS")
#: ``--json`` without a file: the records go to stdout
STDOUT = "-"
#: namespace entries that are not a benchmark's parameters
_NOT_PARAMS = {"bench", "command", "verbose", "argv", "json", "repeat", "dgl_venv"}
#: (derived values a benchmark keeps on the namespace start with "_": not parameters either)
#: Flags whose value may start with "-" (``--fanouts -1,-1``), for every verb's parser.
VALUE_FLAGS = ("--fanouts",)


@dataclass
class Row:
    """One measured row of a benchmark: ``params`` name the row within the run (e.g.
    ``{"schedule": "random", "sampler": "neighbor"}``; rows of different repeats with the same
    ``params`` are one record), ``figures`` are its measured values (units in their names)."""

    params: dict
    figures: dict


class Benchmark:
    """Base of the benchmarks. Subclasses set the class attributes and override
    :meth:`measure` (and any other method).

    ``help``: the one-line description ``twopgraph bench --help`` lists; ``default_graph``:
    the graph when ``--graph`` is not given (None: the benchmark takes no graph);
    ``own_data_flags``: the benchmark's parser has ``--dataset``/``--data-root`` of its own
    (``--graph`` is then another name of ``--dataset``); ``peers``: the peers it can run
    (:mod:`twopgraph.bench.peers`, ``--peers``); ``columns``: the figures its table shows
    (every number when empty); ``standalone``: a verb beside the benchmarks that measures
    nothing (``bench report``): its parser has its own flags only, and :meth:`main` runs it
    instead of the repeats and records."""

    name: str = ""
    help: str = ""
    default_graph: str | None = "synthetic-small"
    own_data_flags: bool = False
    peers: tuple[str, ...] = ()
    columns: tuple[str, ...] = ()
    standalone: bool = False

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add the benchmark's own flags (import-light: no torch, no numba)."""

    def check(self, a: argparse.Namespace) -> None:
        """Validate the own flags; a :class:`~twopgraph.errors.ConfigError` (one line) for a
        bad one. Runs before anything is loaded or measured."""

    def main(self, a: argparse.Namespace) -> int:
        """A :attr:`standalone` verb: run it; the exit code."""
        raise NotImplementedError(f"bench {self.name} is not a standalone verb")

    def measure(self, a: argparse.Namespace, ctx: Context) -> list[Row]:
        """Measure once (one repeat); the rows."""
        raise NotImplementedError(f"benchmark {self.name} does not measure")

    def params(self, a: argparse.Namespace, ctx: Context) -> dict:
        """The run's parameters in every record: the parsed options (``graph`` resolved)."""
        out = {k: v for k, v in vars(a).items()
               if k not in _NOT_PARAMS and not k.startswith("_")}
        if self.default_graph is not None or a.graph is not None:
            out["graph"] = ctx.graph_name
        else:
            out.pop("graph", None)
        return out

    def finish(self, records: list[dict], a: argparse.Namespace, ctx: Context) -> None:
        """After every repeat: write the benchmark's own files (a CSV, a plot)."""

    def show(self, records: list[dict], a: argparse.Namespace) -> None:
        """Print the records: JSON lines with ``--json`` alone, else a table."""
        if a.json == STDOUT:
            for r in records:
                print(dumps(r))
        else:
            print(format_table(records, self.columns))


class Context:
    """What one run of a benchmark shares between its repeats: the parsed options, the graph
    (loaded once, on first use), the repeat being measured, the peers' versions."""

    def __init__(self, a: argparse.Namespace, bench: Benchmark) -> None:
        self.args = a
        self.bench = bench
        self.repeat = 0
        self.peer_versions: dict[str, str] = {}
        self._data = None
        self._dataset: str | None = None
        self._graph: str | None = None

    def sub(self, graph: str) -> Context:
        """A context for another graph (a benchmark over several graphs): the same options
        and peers' versions, the graph ``graph``."""
        other = Context(self.args, self.bench)
        other.repeat, other.peer_versions, other._graph = self.repeat, self.peer_versions, graph
        return other

    @property
    def graph_name(self) -> str | None:
        """The ``--graph`` as given (or the benchmark's default)."""
        if self._graph is not None:
            return self._graph
        return self.args.graph if self.args.graph is not None else self.bench.default_graph

    @property
    def data_root(self) -> str | None:
        """The ``--data-root`` (None: ``$TWOPGRAPH_DATA``, else ``~/.cache/twopgraph``)."""
        return getattr(self.args, "data_root", None)

    def dataset(self) -> str:
        """What ``--dataset`` takes for the graph: its name, or the file a family was
        generated into (:func:`twopgraph.bench.families.family_dataset`)."""
        if self._dataset is None:
            from twopgraph.bench.families import family_dataset, is_family
            g = self.graph_name
            if g is None:
                raise ConfigError(f"bench {self.bench.name} takes no graph")
            self._dataset = (str(family_dataset(g, self.data_root)) if is_family(g) else g)
        return self._dataset

    def data(self) -> GraphData:
        """The graph's :class:`~twopgraph.graph.data.GraphData`, loaded once."""
        if self._data is None:
            from twopgraph.config import DataConfig
            self._data = DataConfig(self.dataset(), self.data_root).validate().load(
                progress=False)
        return self._data


def benchmark_names() -> list[str]:
    """Every registered benchmark, the two historical verbs first (standalone verbs such as
    ``report`` are not benchmarks: :func:`verb_names`)."""
    names = [n for n in BENCHMARKS.names() if not BENCHMARKS.get(n).standalone]
    first = [n for n in ("sampler", "cache") if n in names]
    return first + sorted(n for n in names if n not in first)


def verb_names() -> list[str]:
    """The registered :attr:`Benchmark.standalone` verbs (``report``), by name."""
    return sorted(n for n in BENCHMARKS.names() if BENCHMARKS.get(n).standalone)


def make(name: str) -> Benchmark:
    """An instance of the benchmark ``name`` (an unknown name: one-line ConfigError)."""
    bench = BENCHMARKS.get(name)()
    bench.name = name
    return bench


def add_parsers(bench_parser: argparse.ArgumentParser, parser_class: type) -> None:
    """One sub-parser per benchmark under ``bench_parser`` (``twopgraph bench``): its own
    flags, then the shared ones (:func:`add_shared_arguments`); then the standalone verbs
    (:func:`verb_names`: ``report``), their own flags only."""
    sub = bench_parser.add_subparsers(dest="bench", required=True, parser_class=parser_class)
    for name in benchmark_names() + verb_names():
        bench = make(name)
        doc = inspect.cleandoc(type(bench).__doc__ or "")
        p = sub.add_parser(name, help=bench.help or doc.split("\n")[0], description=doc,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        bench.add_arguments(p)
        if not bench.standalone:
            add_shared_arguments(p, bench)


def add_shared_arguments(p: argparse.ArgumentParser, bench: Benchmark) -> None:
    """``--graph``, ``--data-root``, ``--repeat``, ``--json`` (and, for a benchmark with peers,
    ``--peers`` and their venvs)."""
    g = p.add_argument_group("shared benchmark options")
    if bench.own_data_flags:
        g.add_argument("--graph", dest="graph", default=None, metavar="GRAPH",
                       help="another name of --dataset")
    else:
        shown = bench.default_graph or "none: this benchmark takes no graph"
        g.add_argument("--graph", "--dataset", dest="graph", default=None, metavar="GRAPH",
                       help="the graph: a dataset name as `train --dataset` takes it, a .npz "
                            "or store path, or a generated family rmat:SCALE[:EDGEFACTOR] | "
                            "rgg:N[:DEGREE] | ba:N[:M] | scaled:N (synthetic-products scaled "
                            f"to N vertices) (default: {shown})")
        g.add_argument("--data-root", default=None,
                       help="where datasets (and generated families) are made and looked up "
                            "(default: $TWOPGRAPH_DATA, else ~/.cache/twopgraph)")
    g.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="measure N times; figures are the median, with the spread min/max "
                        "(default: 1)")
    own = " (this benchmark's own JSON, as always)" if bench.own_data_flags else ""
    g.add_argument("--json", nargs="?", const=STDOUT, default=None, metavar="OUT",
                   help="append the records to OUT as JSON lines (benchmark, params, figures, "
                        "spread, machine, versions, commit); without OUT: print JSON on "
                        f"stdout{own} instead of the table")
    if bench.peers:
        from twopgraph.bench.peers import add_peer_arguments
        add_peer_arguments(g, bench.peers)


def check_shared(a: argparse.Namespace, bench: Benchmark) -> None:
    """The shared options: ``--repeat`` >= 1, ``--json`` not a folder, ``--graph`` only for a
    benchmark that takes one (and, as ``--dataset``'s other name, the same)."""
    if not isinstance(a.repeat, int) or a.repeat < 1:
        raise ConfigError(f"--repeat must be >= 1, got {a.repeat}")
    if a.json not in (None, STDOUT) and Path(a.json).is_dir():
        raise ConfigError(f"--json {a.json} is a folder; give a file to append to")
    if bench.own_data_flags and a.graph is not None:
        if a.dataset not in (a.graph, bench.default_graph):
            raise ConfigError(f"--graph {a.graph} and --dataset {a.dataset} differ; give one")
        a.dataset = a.graph
    if bench.default_graph is None and a.graph is not None:
        raise ConfigError(f"bench {bench.name} takes no --graph")
    if bench.peers:
        from twopgraph.bench.peers import check_peers
        check_peers(a)


def run(a: argparse.Namespace) -> int:
    """Run the benchmark of the parsed ``twopgraph bench NAME ...`` options: every repeat,
    then its files, its output and the ``--json`` records. The exit code (0; a
    :attr:`Benchmark.standalone` verb's own, from :meth:`Benchmark.main`)."""
    bench = make(a.bench)
    if bench.standalone:
        return bench.main(a)
    check_shared(a, bench)
    bench.check(a)
    ctx = Context(a, bench)
    if bench.own_data_flags:
        ctx.args.graph = a.dataset
    rows: dict[str, tuple[dict, list[dict]]] = {}
    t0 = time.perf_counter()
    for i in range(a.repeat):
        ctx.repeat = i
        if a.repeat > 1:
            log.info("bench %s: repeat %d of %d", bench.name, i + 1, a.repeat)
        for row in bench.measure(a, ctx):
            key = json.dumps(row.params, sort_keys=True, default=str)
            rows.setdefault(key, (row.params, []))[1].append(row.figures)
    base = bench.params(a, ctx)
    records = [make_record(bench.name, {**base, **params}, figs, ctx.peer_versions)
               for params, figs in rows.values()]
    log.info("bench %s: %d row(s) x %d repeat(s) in %.1f s", bench.name, len(records),
             a.repeat, time.perf_counter() - t0)
    bench.finish(records, a, ctx)
    bench.show(records, a)
    if a.json not in (None, STDOUT):
        append_jsonl(a.json, records)
        log.info("bench %s: appended %d record(s) to %s", bench.name, len(records), a.json)
    return 0


# -- the terminal table ----------------------------------------------------------------------------
def fmt(v: object) -> str:
    """One value for a table: 4 significant digits (whole numbers from 1000 up, with
    thousands separators), lists comma-separated, None as "-"."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        return ",".join(fmt(x) for x in v)
    if isinstance(v, dict):
        return ",".join(f"{k}={fmt(x)}" for k, x in v.items()) or "-"
    return str(v)


def format_table(records: list[dict], columns: tuple[str, ...] = ()) -> str:
    """The records as an aligned table: the parameters that differ between rows, then the
    ``columns`` figures (every number when empty); a figure measured more than once shows
    its spread, ``median (min-max)``."""
    if not records:
        return "(no rows)"
    params = [k for k in dict.fromkeys(k for r in records for k in r["params"])
              if len({json.dumps(r["params"].get(k), default=str) for r in records}) > 1]
    cols = list(columns) or [k for k in dict.fromkeys(k for r in records for k in r["figures"])
                             if any(is_number(r["figures"].get(k)) for r in records)]
    cols = [c for c in cols if any(c in r["figures"] for r in records)]
    head = params + cols
    body = []
    for r in records:
        line = [fmt(r["params"].get(k)) for k in params]
        for c in cols:
            v, s = r["figures"].get(c), r["spread"].get(c)
            text = fmt(v)
            if s is not None and r["repeat"] > 1 and s[0] != s[1]:
                text += f" ({fmt(s[0])}-{fmt(s[1])})"
            line.append(text)
        body.append(line)
    width = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    out = ["  ".join(h.rjust(w) for h, w in zip(head, width))]
    out += ["  ".join(x.rjust(w) for x, w in zip(b, width)) for b in body]
    return "\n".join(out)


# -- python -m twopgraph.bench ---------------------------------------------------------------------
class OneLineParser(argparse.ArgumentParser):
    """argparse whose usage errors are one line (exit 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"twopgraph: error: {message} (see `{self.prog} --help`)\n")


def join_values(argv: list[str]) -> list[str]:
    """``--fanouts -1,-1`` as ``--fanouts=-1,-1`` (argparse would take ``-1,-1`` for a flag)."""
    out, it = [], iter(argv)
    for x in it:
        if x in VALUE_FLAGS:
            v = next(it, None)
            out.append(x if v is None else f"{x}={v}")
        else:
            out.append(x)
    return out


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m twopgraph.bench``: ``twopgraph bench``'s."""
    p = OneLineParser(prog="twopgraph bench", description="Benchmarks of twopgraph's "
                      "components (`twopgraph bench NAME --help`).")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    add_parsers(p, OneLineParser)
    return p


def main(argv: list[str] | None = None) -> int:
    """``python -m twopgraph.bench NAME ...``: the same as ``twopgraph bench NAME ...``
    (exit codes: 0 ok, 2 bad input, 130 interrupted, 128 + N stopped by signal N)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    a = build_parser().parse_args(join_values(argv))
    a.argv = argv
    logging.basicConfig(level=logging.DEBUG if a.verbose else logging.INFO,
                        format="%(asctime)s %(message)s", datefmt="%H:%M:%S", stream=sys.stderr)
    try:
        from twopgraph.runtime.heap import configure_heap
        from twopgraph.runtime.jit import configure_threading
        configure_heap()
        configure_threading()
        return run(a)
    except TwopgraphError as e:
        print(f"twopgraph: error: {e}", file=sys.stderr)
        return e.exit_code
    except Stopped as e:
        print(f"twopgraph: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("twopgraph: interrupted", file=sys.stderr)
        return 130
