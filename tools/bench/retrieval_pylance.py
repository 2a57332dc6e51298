"""pylance 14.0.2's side of `cargo xtask bench --retrieval`.

`omnigraph-bench --retrieval --retrieval-dir DIR` leaves in DIR the vectors
(`vectors.parquet`), the queries with their exact answers and the index OmniGraph chose
(`queries.json`), and its own figures (`omnigraph.json`). This builds the same index
(type, partitions, L2) with pylance on the same vectors, runs the same queries at the
same minimum probe count and re-ranking factor (`refine_factor`), and prints both
sides with the ratios.
"""

import json
import pathlib
import sys
import time

import lance
import numpy as np
import pyarrow.parquet as pq


def percentile(times, percent):
    times = sorted(times)
    return times[min(len(times) * percent // 100, len(times) - 1)] * 1e3


def main(folder):
    folder = pathlib.Path(folder)
    spec = json.loads((folder / "queries.json").read_text())
    ours = json.loads((folder / "omnigraph.json").read_text())
    uri = folder / "pylance.lance"
    dataset = lance.write_dataset(pq.read_table(folder / "vectors.parquet"), uri, mode="overwrite")

    params = {
        "index_type": spec["index_type"],
        "num_partitions": spec["partitions"],
        "metric": "l2",
    }
    if spec["index_type"] == "IVF_PQ":
        params["num_sub_vectors"] = spec["dimension"] // 16
    started = time.perf_counter()
    dataset.create_index("embedding", **params)
    build_seconds = time.perf_counter() - started
    index_bytes = sum(p.stat().st_size for p in (uri / "_indices").rglob("*") if p.is_file())

    queries = np.asarray(spec["queries"], dtype=np.float32)
    k, nprobes, refine = spec["k"], spec["nprobes"], spec.get("refine")

    def run(q):
        nearest = {"column": "embedding", "q": q, "k": k, "minimum_nprobes": nprobes}
        if refine is not None:
            nearest["refine_factor"] = refine
        return dataset.to_table(columns=["id", "_distance"], nearest=nearest).column("id").to_pylist()

    for q in queries:
        run(q)
    times, hits = [], 0
    for q, exact in zip(queries, spec["truth"]):
        started = time.perf_counter()
        found = run(q)
        times.append(time.perf_counter() - started)
        hits += len(set(found) & set(exact))
    theirs = {
        "build_seconds": build_seconds,
        "index_bytes": index_bytes,
        "recall_at_10": hits / (len(spec["truth"]) * k),
        "p50_ms": percentile(times, 50),
        "p99_ms": percentile(times, 99),
    }
    mine = {
        "build_seconds": ours["build_seconds"],
        "index_bytes": ours["index_bytes"],
        **ours["default_nprobes"],
    }
    print(json.dumps({
        "index": {"type": spec["index_type"], "partitions": spec["partitions"],
                  "nprobes": nprobes, "refine": refine},
        "omnigraph": mine,
        "pylance": theirs,
        "build_time_ratio": mine["build_seconds"] / theirs["build_seconds"],
        "p50_ratio": mine["p50_ms"] / theirs["p50_ms"],
        "p99_ratio": mine["p99_ms"] / theirs["p99_ms"],
        "index_bytes_ratio": mine["index_bytes"] / max(theirs["index_bytes"], 1),
    }, indent=2))


if __name__ == "__main__":
    main(sys.argv[1])
