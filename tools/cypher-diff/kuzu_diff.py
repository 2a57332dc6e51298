"""The oracle's second half (`cargo xtask cypher-diff`): runs each query of
`omnigraph-cypher-diff`'s cases on Kuzu over the same graph and compares the rows with
OmniGraph's, as multisets (in order where the query orders every column).

Usage: kuzu_diff.py CASES.jsonl [--show N]
Exit 0 when every query agrees; 1 otherwise, printing each difference with its seed.
"""

import decimal
import json
import math
import sys
import tempfile

import kuzu

SCHEMA = [
    "CREATE NODE TABLE Person(id INT64, name STRING, age INT64, PRIMARY KEY (id))",
    "CREATE NODE TABLE City(id INT64, name STRING, population INT64, PRIMARY KEY (id))",
    "CREATE REL TABLE Knows(FROM Person TO Person, since INT64)",
    "CREATE REL TABLE LivesIn(FROM Person TO City)",
]


def normal(value):
    """One value as both engines' results compare: floats to 9 significant digits."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, decimal.Decimal):
        value = int(value) if value == value.to_integral_value() else float(value)
        return normal(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if value == int(value) and abs(value) < 2**53:
            return int(value)
        return float(f"{value:.9g}")
    if isinstance(value, (list, tuple)):
        return [normal(v) for v in value]
    if isinstance(value, dict):
        return {k: normal(v) for k, v in sorted(value.items())}
    return str(value)


def key(row):
    return json.dumps(row, sort_keys=True)


def load(connection, graph):
    for statement in SCHEMA:
        connection.execute(statement)
    for person in graph["persons"]:
        connection.execute(
            "CREATE (:Person {id: $id, name: $name, age: $age})", person
        )
    for city in graph["cities"]:
        connection.execute(
            "CREATE (:City {id: $id, name: $name, population: $population})", city
        )
    for edge in graph["knows"]:
        connection.execute(
            "MATCH (a:Person {id: $src}), (b:Person {id: $dst}) CREATE (a)-[:Knows {since: $since}]->(b)",
            edge,
        )
    for edge in graph["lives"]:
        connection.execute(
            "MATCH (a:Person {id: $src}), (b:City {id: $dst}) CREATE (a)-[:LivesIn]->(b)",
            edge,
        )


def main():
    path = sys.argv[1]
    show = int(sys.argv[sys.argv.index("--show") + 1]) if "--show" in sys.argv else 10
    total = agreed = both_refused = 0
    differences = []
    with open(path) as cases:
        for line in cases:
            case = json.loads(line)
            with tempfile.TemporaryDirectory() as folder:
                database = kuzu.Database(f"{folder}/db")
                connection = kuzu.Connection(database)
                load(connection, case["graph"])
                for q in case["queries"]:
                    total += 1
                    try:
                        result = connection.execute(q["text"])
                        theirs = [normal(list(row)) for row in result.get_all()]
                        their_error = None
                    except RuntimeError as error:
                        theirs, their_error = None, str(error)
                    ours = None if "error" in q else [normal(row) for row in q["rows"]]
                    if ours is None and theirs is None:
                        both_refused += 1
                        continue
                    if ours is not None and theirs is not None:
                        if not q["ordered"]:
                            ours, theirs = sorted(ours, key=key), sorted(theirs, key=key)
                        if ours == theirs:
                            agreed += 1
                            continue
                    differences.append(
                        {
                            "seed": case["seed"],
                            "query": q["text"],
                            "omnigraph": q.get("error") or ours,
                            "kuzu": their_error or theirs,
                        }
                    )
    for difference in differences[:show]:
        print(json.dumps(difference))
    print(
        f"cypher-diff: {total} queries, {agreed} agree, {both_refused} refused by both, "
        f"{len(differences)} differ"
    )
    sys.exit(1 if differences else 0)


if __name__ == "__main__":
    main()
