"""The interop check (`cargo xtask interop`): the `omnigraph` CLI writes a graph, and
the second reader in omnigraph_reader.py, written only from docs/format.md, reads it
with pylance and must see exactly what the CLI reports. Then a cleanup reclaims old
commits below the floor (on a sped-up clock): the reader finds the head and refuses a
reclaimed commit, and the log still lists every commit. Then pylance writes one row to
a table's linear lineage: `omnigraph repair` must report foreign drift, and neither
reader may see the row.

Usage: check.py OMNIGRAPH_BINARY SCHEMA_FILE
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import lance
import pyarrow

from omnigraph_reader import Graph, FormatError, Reclaimed

LIMIT = "100000"


def cli(binary, *args, expect=0):
    done = subprocess.run([binary, *args, "--json"], capture_output=True, text=True)
    if done.returncode != expect:
        sys.exit(
            f"interop: `omnigraph {' '.join(args)}` exited {done.returncode}, expected {expect}\n"
            f"{done.stdout}\n{done.stderr}"
        )
    return json.loads(done.stdout) if done.stdout.strip() else None


def cli_ids(binary, root, type_name, key, at=None):
    args = ["query", root, "--type", type_name, "--limit", LIMIT]
    if at is not None:
        args += ["--at", str(at)]
    return sorted(row[key] for row in cli(binary, *args)["rows"])


def expect(condition, message):
    if not condition:
        sys.exit(f"interop: {message}")


def main():
    binary, schema = sys.argv[1], sys.argv[2]
    work = tempfile.mkdtemp(prefix="omnigraph-interop-")
    root = os.path.join(work, "graph")
    cli(binary, "init", root, "--schema", schema)

    lines = [{"type": "Person", "id": f"p{i}", "name": f"Person {i}", "age": 20 + i % 50} for i in range(60)]
    lines += [{"type": "Company", "id": f"c{i}", "name": f"Company {i}"} for i in range(5)]
    lines += [{"type": "WorksAt", "id": f"w{i}", "src": f"p{i}", "dst": f"c{i % 5}", "since": 2000 + i} for i in range(40)]
    data = os.path.join(work, "load.jsonl")
    with open(data, "w") as f:
        f.write("\n".join(json.dumps(line) for line in lines) + "\n")
    cli(binary, "load", root, data)
    loaded = cli(binary, "status", root)["head"]["seq"]
    cli(binary, "insert", root, "--type", "Person", "--rows", json.dumps({"id": "p100", "name": "Late"}))
    cli(binary, "update", root, "--type", "Person", "--where", "id = 'p1'", "--set", "name=Renamed")
    updated = cli(binary, "status", root)["head"]["seq"]
    cli(binary, "build-indexes", root)
    cli(binary, "delete", root, "--type", "Person", "--where", "id = 'p2'")
    cli(binary, "optimize", root)
    head_seq = cli(binary, "status", root)["head"]["seq"]

    graph = Graph(root)
    head = graph.head()
    expect(head["seq"] == head_seq, f"head {head['seq']}, the CLI says {head_seq}")
    keys = {"Person": "id", "Company": "id", "WorksAt": "id", "Document": "id", "Wrote": "id"}
    for seq in [None, updated, loaded]:
        commit, tables = graph.snapshot(seq)
        for type_name, table in tables.items():
            ours = sorted(table.column(keys[type_name]).to_pylist())
            theirs = cli_ids(binary, root, type_name, keys[type_name], seq)
            expect(ours == theirs, f"{type_name} at {seq}: {len(ours)} rows here, {len(theirs)} from the CLI")
        print(f"interop: commit {commit['seq']}: {', '.join(f'{t} {v.num_rows}' for t, v in tables.items())}")

    def name_of(seq, key):
        _, tables = graph.snapshot(seq)
        people = tables["Person"].to_pylist()
        return next((row["name"] for row in people if row["id"] == key), None)

    expect(name_of(None, "p1") == "Renamed", "the update is not at the head")
    expect(name_of(loaded, "p1") == "Person 1", "time travel does not show the old name")
    expect(name_of(None, "p2") is None and name_of(updated, "p2") == "Person 2", "the delete is wrong")
    edges = sorted(graph.snapshot()[1]["WorksAt"].column("src").to_pylist())
    expect("p2" not in edges, "a deleted node kept its edge")

    # Cleanup keeps one commit, on a clock sped up so that everything written is older
    # than the grace period: it reclaims the older commits' objects below the floor
    # after writing their history (section 8.4). The reader finds the same head, with
    # HEAD and by listing, refuses a reclaimed commit, and the CLI's log still lists
    # every commit.
    sped_up = dict(os.environ)
    sped_up["OMNIGRAPH_TEST_CLOCK_SCALE"] = f"{int(time.time() * 1e6) - 120_000_000}:1000"
    done = subprocess.run(
        [binary, "cleanup", root, "--keep", "1", "--grace", "1m", "--confirm", "--json"],
        capture_output=True, text=True, env=sped_up,
    )
    expect(done.returncode == 0, f"cleanup exited {done.returncode}: {done.stdout}\n{done.stderr}")
    cleaned = json.loads(done.stdout)
    floor = cleaned["logs"][0]["floor"]
    expect(floor > loaded, f"the floor is {floor}")
    expect(graph.floor() == floor, f"the reader's floor is {graph.floor()}, the CLI's {floor}")
    head_seq = cli(binary, "status", root)["head"]["seq"]
    expect(graph.head()["seq"] == head_seq, "the reader's head after cleanup")
    expect(graph.commit(1) is None, "commit 1's object is still there")
    try:
        graph.snapshot(loaded)
        sys.exit("interop: a reclaimed commit was read")
    except Reclaimed:
        pass
    os.remove(os.path.join(root, "_graph/branches/main/HEAD"))
    expect(graph.head()["seq"] == head_seq, "the reader's head by listing after cleanup")
    logged = cli(binary, "log", root, "--limit", "1000")["commits"]
    expect([entry["seq"] for entry in logged] == list(range(head_seq, -1, -1)), "the log lists every commit")
    expect(all(entry["reclaimed"] == (entry["seq"] < floor) for entry in logged), "reclaimed flags")
    print(f"interop: cleanup reclaimed the commits below {floor}; the log lists all {len(logged)}")

    # A foreign write: one row appended to Person's linear lineage with plain pylance.
    before = cli_ids(binary, root, "Person", "id")
    pin = next(p for p in head["pins"] if p["type_name"] == "Person")
    uri = os.path.join(root, pin["path"])
    row = graph.table(head, "Person").to_table().slice(0, 1)
    row = row.set_column(row.schema.get_field_index("id"), "id", pyarrow.array(["foreign"]))
    lance.write_dataset(row, uri, mode="append")
    report = cli(binary, "repair", root, expect=3)
    person = next(t for t in report["tables"] if t["table_id"] == pin["table_id"])
    expect(person["status"] == "foreign_drift", f"repair says {person['status']}")
    expect(cli_ids(binary, root, "Person", "id") == before, "the CLI sees the foreign row")
    _, tables = graph.snapshot()
    expect("foreign" not in tables["Person"].column("id").to_pylist(), "the reader sees the foreign row")
    print("interop: foreign drift reported; neither reader sees the foreign row")

    # A version this reader does not know is refused.
    with open(os.path.join(root, "_graph/FORMAT")) as f:
        doc = json.load(f)
    doc["format_version"] = 2
    with open(os.path.join(root, "_graph/FORMAT"), "w") as f:
        json.dump(doc, f)
    try:
        Graph(root)
        sys.exit("interop: a format version 2 root was read")
    except FormatError:
        pass
    cli(binary, "status", root, expect=1)
    # Kept on a failure above, for a look at what was written.
    shutil.rmtree(work)
    print("interop: ok")


if __name__ == "__main__":
    main()
