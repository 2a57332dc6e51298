"""Kuzu's COPY FROM on the graph bench's Parquet files, for comparison.

Usage: python kuzu_load.py DIR  (DIR holds people.parquet and knows.parquet, written by
`omnigraph-bench --graph --kuzu-dir DIR`). Prints one JSON document: the seconds of
each COPY, their total, and the peak resident memory of this process in MiB.
"""

import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import kuzu


def main() -> None:
    data = Path(sys.argv[1])
    with tempfile.TemporaryDirectory() as scratch:
        database = kuzu.Database(str(Path(scratch) / "graph.kuzu"))
        connection = kuzu.Connection(database)
        connection.execute(
            "CREATE NODE TABLE Person(id STRING, name STRING, age INT32, PRIMARY KEY (id))"
        )
        connection.execute("CREATE REL TABLE Knows(FROM Person TO Person, since INT32)")
        started = time.perf_counter()
        connection.execute(f"COPY Person FROM '{data / 'people.parquet'}'")
        nodes = time.perf_counter() - started
        connection.execute(f"COPY Knows FROM '{data / 'knows.parquet'}'")
        total = time.perf_counter() - started
        counted = connection.execute("MATCH ()-[k:Knows]->() RETURN count(k)").get_next()[0]
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {
                "kuzu_version": kuzu.__version__,
                "kuzu_nodes_seconds": nodes,
                "kuzu_edges_seconds": total - nodes,
                "kuzu_total_seconds": total,
                "kuzu_edges_loaded": counted,
                "kuzu_peak_mib": peak_kib / 1024,
            }
        )
    )


if __name__ == "__main__":
    main()
