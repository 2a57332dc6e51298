"""Kuzu on the query bench's graph, beside OmniGraph's figures.

Usage: python kuzu_query.py DIR  (DIR holds the Parquet files and queries.json, written
by `omnigraph-bench --query --kuzu-dir DIR`). Loads the same files with COPY FROM, runs
each query of the suite as many times as OmniGraph did, checks that both engines return
the same rows, and prints a table: p50 and p99 of each, their ratio (OmniGraph / Kuzu),
the geometric mean of the p50 ratios, load times and peak memory. Exits 1 when the rows
differ.
"""

import json
import math
import resource
import sys
import tempfile
import time
from pathlib import Path

import kuzu

TABLES = {
    "Person": "CREATE NODE TABLE Person(id INT64, name STRING, gender STRING, age INT64, PRIMARY KEY (id))",
    "City": "CREATE NODE TABLE City(id INT64, name STRING, PRIMARY KEY (id))",
    "State": "CREATE NODE TABLE State(id INT64, name STRING, PRIMARY KEY (id))",
    "Country": "CREATE NODE TABLE Country(id INT64, name STRING, PRIMARY KEY (id))",
    "Interest": "CREATE NODE TABLE Interest(id INT64, name STRING, PRIMARY KEY (id))",
    "Follows": "CREATE REL TABLE Follows(FROM Person TO Person)",
    "LivesIn": "CREATE REL TABLE LivesIn(FROM Person TO City)",
    "CityIn": "CREATE REL TABLE CityIn(FROM City TO State)",
    "StateIn": "CREATE REL TABLE StateIn(FROM State TO Country)",
    "HasInterest": "CREATE REL TABLE HasInterest(FROM Person TO Interest)",
}


def normal(value):
    if isinstance(value, float):
        return float(f"{value:.9g}")
    if isinstance(value, list):
        return [normal(v) for v in value]
    return value


def percentile(sorted_times, p):
    at = round((len(sorted_times) - 1) * p)
    return sorted_times[min(at, len(sorted_times) - 1)]


def main() -> None:
    data = Path(sys.argv[1])
    ours = json.loads((data / "queries.json").read_text())
    runs = ours["runs"]
    rows_differ = []
    table = []
    with tempfile.TemporaryDirectory() as scratch:
        database = kuzu.Database(str(Path(scratch) / "graph.kuzu"))
        connection = kuzu.Connection(database)
        for statement in TABLES.values():
            connection.execute(statement)
        started = time.perf_counter()
        for entry in ours["tables"]:
            connection.execute(f"COPY {entry['table']} FROM '{data / entry['file']}'")
        load_seconds = time.perf_counter() - started
        load_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        for query in ours["queries"]:
            times = []
            rows = None
            for _ in range(runs):
                started = time.perf_counter()
                result = connection.execute(query["query"])
                rows = [normal(list(row)) for row in result.get_all()]
                times.append((time.perf_counter() - started) * 1e3)
            times.sort()
            theirs = {"p50_ms": percentile(times, 0.5), "p99_ms": percentile(times, 0.99)}
            if rows != normal(query["rows"]):
                rows_differ.append({"name": query["name"], "omnigraph": query["rows"], "kuzu": rows})
            table.append((query, theirs))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    print(f"{'query':<32} {'ours p50':>10} {'ours p99':>10} {'kuzu p50':>10} {'kuzu p99':>10} {'p50 ratio':>10}")
    ratios = []
    for query, theirs in table:
        ratio = query["p50_ms"] / max(theirs["p50_ms"], 1e-9)
        ratios.append(ratio)
        print(
            f"{query['name']:<32} {query['p50_ms']:>10.1f} {query['p99_ms']:>10.1f} "
            f"{theirs['p50_ms']:>10.1f} {theirs['p99_ms']:>10.1f} {ratio:>9.2f}x"
        )
    geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    print(f"geometric mean of the p50 ratios: {geomean:.2f}x; worst {max(ratios):.2f}x")
    print(
        f"load: OmniGraph {ours['omnigraph_load_seconds']:.2f} s, Kuzu {load_seconds:.2f} s "
        f"({ours['omnigraph_load_seconds'] / load_seconds:.2f}x); OmniGraph's optimize after it "
        f"{ours['omnigraph_optimize_seconds']:.2f} s (load and optimize "
        f"{(ours['omnigraph_load_seconds'] + ours['omnigraph_optimize_seconds']) / load_seconds:.2f}x); peak memory: OmniGraph "
        f"{ours['omnigraph_load_peak_mib']:.0f} MiB load, {ours['omnigraph_query_peak_mib']:.0f} MiB queries; "
        f"Kuzu {load_peak:.0f} MiB load, {peak:.0f} MiB overall (kuzu {kuzu.__version__})"
    )
    for difference in rows_differ:
        print("rows differ:", json.dumps(difference))
    sys.exit(1 if rows_differ else 0)


if __name__ == "__main__":
    main()
