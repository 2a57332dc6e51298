"""The client against a live `omnigraph serve` this test starts on a fresh graph.

Run by `cargo xtask client` (OMNIGRAPH_BIN names the binary, OMNIGRAPH_SCHEMA a schema
with Person, Company and WorksAt)."""

import json
import math
import os
import random
import subprocess
import sys
import tempfile
import unittest

import pandas
import pyarrow as pa
import pyarrow.compute  # noqa: F401 (pa.compute)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from omnigraph_client import Graph, OmniGraphError  # noqa: E402

BINARY = os.environ["OMNIGRAPH_BIN"]
SCHEMA = os.environ["OMNIGRAPH_SCHEMA"]


def omnigraph(*args):
    done = subprocess.run([BINARY, *args, "--json"], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


class ServedGraph(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.folder = tempfile.TemporaryDirectory()
        root = os.path.join(cls.folder.name, "people")
        omnigraph("init", root, "--schema", SCHEMA)
        tokens = os.path.join(cls.folder.name, "tokens.json")
        cls.admin = omnigraph("token", "add", tokens, "--role", "admin")["token"]
        cls.reader = omnigraph("token", "add", tokens, "--role", "read")["token"]
        cls.server = subprocess.Popen(
            [BINARY, "serve", root, "--listen", "127.0.0.1:0", "--tokens", tokens, "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        document = ""
        while not document.endswith("}\n"):
            line = cls.server.stdout.readline()
            if not line:
                raise RuntimeError("the server stopped: " + cls.server.stderr.read())
            document += line
        cls.url = json.loads(document)["listening"] + "/graphs/people"
        cls.graph = Graph(cls.url, token=cls.admin)

    @classmethod
    def tearDownClass(cls):
        cls.server.send_signal(2)
        cls.server.wait(timeout=60)
        assert cls.server.returncode == 0, cls.server.stderr.read()
        cls.folder.cleanup()

    def count(self, label, **options):
        table = self.graph.query(f"MATCH (n:{label}) RETURN count(*) AS n", **options)
        return table.column("n")[0].as_py()

    def test_a_round_trip_through_every_kind_of_call(self):
        g = self.graph
        people = pa.table({
            "id": [f"p{n}" for n in range(100)],
            "name": [f"person {n}" for n in range(100)],
            "age": pa.array([20 + n % 50 for n in range(100)], type=pa.int32()),
        })
        written = g.write("Person", people)
        self.assertEqual(written["rows"], {"Person": 100})
        frame = pandas.DataFrame({"id": ["c1", "c2"], "name": ["Acme", "Globex"]})
        self.assertEqual(g.write("Company", frame)["rows"], {"Company": 2})
        g.insert("WorksAt", [{"src": "p1", "dst": "c1", "since": 2020}, {"src": "p2", "dst": "c2"}])

        table = g.query(
            "MATCH (p:Person)-[:WorksAt]->(c:Company) WHERE p.age >= $min "
            "RETURN p.id AS person, c.name AS company ORDER BY person", min=21)
        self.assertIsInstance(table, pa.Table)
        self.assertEqual(table.to_pylist(), [
            {"person": "p1", "company": "Acme"}, {"person": "p2", "company": "Globex"}])
        seq_before_update = g.status()["head"]["seq"]
        g.update("Person", "id = 'p1'", {"name": "renamed"})
        g.delete("Person", "id = 'p99'")
        self.assertEqual(self.count("Person"), 99)
        self.assertEqual(self.count("Person", at=seq_before_update), 100)
        names = g.query("MATCH (p:Person {id: 'p1'}) RETURN p.name AS name").column("name").to_pylist()
        self.assertEqual(names, ["renamed"])

        # A type's whole table, streamed, at the head and at an earlier commit.
        exported = g.export("Person").sort_by("id")
        self.assertEqual(exported.column_names, ["id", "name", "age", "embedding"])
        self.assertEqual(exported.num_rows, 99)
        self.assertEqual(exported.filter(pa.compute.equal(exported["id"], "p1"))["name"].to_pylist(),
                         ["renamed"])
        self.assertEqual(g.export("Person", at=seq_before_update).num_rows, 100)
        self.assertEqual(sum(b.num_rows for b in g.export_batches("WorksAt")), 2)
        with self.assertRaises(OmniGraphError) as unknown:
            g.export("Nobody")
        self.assertEqual(unknown.exception.status, 404)

        # A retried write with its key lands once.
        key = "one-logical-write"
        first = g.insert("Company", [{"id": "c3", "name": "Initech"}], idempotency_key=key)
        again = g.insert("Company", [{"id": "c3", "name": "Initech"}], idempotency_key=key)
        self.assertTrue(again["replayed"])
        self.assertEqual(again["commit"]["commit_id"], first["commit"]["commit_id"])
        self.assertEqual(self.count("Company"), 3)
        # The key again with another write: refused, nothing written.
        with self.assertRaises(OmniGraphError) as reused:
            g.insert("Company", [{"id": "c9", "name": "Other"}], idempotency_key=key)
        self.assertEqual(reused.exception.status, 422)
        self.assertEqual(reused.exception.code, "idempotency_key_reused")
        self.assertEqual(self.count("Company"), 3)

        # Branches.
        g.create_branch("feature")
        g.insert("Company", [{"id": "c4", "name": "Hooli"}], branch="feature")
        self.assertEqual(self.count("Company"), 3)
        self.assertEqual(self.count("Company", branch="feature"), 4)
        self.assertIsNone(g.merge("feature", dry_run=True)["commit"])
        g.merge("feature")
        self.assertEqual(self.count("Company"), 4)
        self.assertIn("feature", [b["name"] for b in g.branches()])
        g.delete_branch("feature")
        self.assertNotIn("feature", [b["name"] for b in g.branches()])

        # History and maintenance.
        self.assertGreaterEqual(len(g.commits(limit=5)), 5)
        self.assertEqual({t["type"] for t in g.tables()}, {"Person", "Company", "WorksAt", "Document", "Wrote"})
        run = g.optimize()
        self.assertEqual(run["state"], "finished")
        self.assertEqual(self.count("Person"), 99)
        preview = g.cleanup(keep=1)
        self.assertEqual(preview["operation"], "cleanup_preview")

        # Retrieval runs unchanged: a text leg through the index optimize built, and a
        # fusion prefiltered to the people who work at Acme.
        found = g.query(
            "CALL omni.text('Person', 'name', $q, 5) YIELD node, rank "
            "RETURN node.id AS id, rank ORDER BY rank, id", q="renamed")
        self.assertEqual(found.to_pylist(), [{"id": "p1", "rank": 1}])
        fused = g.query(
            "MATCH (p:Person)-[:WorksAt]->(:Company {name: 'Acme'}) "
            "CALL omni.fuse(p, [{text: 'name', query: $q, k: 5}], 5) YIELD score, ranks "
            "RETURN p.id AS id, ranks", q="renamed")
        self.assertEqual(fused.to_pylist(), [{"id": "p1", "ranks": [1]}])

    def test_bm25_agrees_with_an_independent_computation(self):
        """A text leg's scores and top 10 against BM25 computed here from its formula
        (k1 = 1.2, b = 0.75, idf = ln((N - n + 0.5) / (n + 0.5) + 1)), on a fixed corpus
        of words no stemmer shortens and no stop-word list holds."""
        words = ["graph", "lance", "vector", "kernel", "tensor", "prism", "falcon",
                 "meadow", "quartz", "ember", "harbor", "cobalt"]
        rng = random.Random(50)
        bodies = {}
        for n in range(80):
            # Skewed, so words differ in how many documents hold them.
            body = [words[min(rng.randrange(len(words)), rng.randrange(len(words)))]
                    for _ in range(rng.randrange(3, 12))]
            bodies[f"d{n:02}"] = body
        self.graph.write("Document", pa.table({
            "id": list(bodies), "title": list(bodies),
            "body": [" ".join(body) for body in bodies.values()],
        }))
        count = len(bodies)
        average = sum(len(body) for body in bodies.values()) / count

        def bm25(terms, holds):
            """The top 10 by BM25 of the documents `holds` keeps."""
            scores = {}
            for key, body in bodies.items():
                if not holds(body, terms):
                    continue
                score = 0.0
                for term in terms:
                    tf = body.count(term)
                    if tf == 0:
                        continue
                    holding = sum(1 for other in bodies.values() if term in other)
                    idf = math.log((count - holding + 0.5) / (holding + 0.5) + 1)
                    norm = 1.2 * (1 - 0.75 + 0.75 * len(body) / average)
                    score += idf * 2.2 * tf / (tf + norm)
                if score > 0:
                    scores[key] = score
            ranked = sorted(scores.items(), key=lambda hit: (-hit[1], hit[0]))[:10]
            # Competition ranks: equal scores share one.
            hits = []
            for place, (key, score) in enumerate(ranked):
                tied = hits and math.isclose(hits[-1][2], score, rel_tol=1e-6)
                hits.append((key, hits[-1][1] if tied else place + 1, score))
            return hits

        def served(text, match):
            table = self.graph.query(
                "CALL omni.text('Document', 'body', $q, 10, {match: $match}) YIELD node, rank, score "
                "RETURN node.id AS id, rank, score ORDER BY rank, id", q=text, match=match)
            return [(row["id"], row["rank"], row["score"]) for row in table.to_pylist()]

        def any_word(body, terms):
            return any(term in body for term in terms)

        def every_word(body, terms):
            return all(term in body for term in terms)

        def agree(text, match):
            expected = bm25(text.split(" "), every_word if match == "all" else any_word)
            found = served(text, match)
            self.assertTrue(expected, text)
            self.assertEqual([hit[:2] for hit in found], [hit[:2] for hit in expected], text)
            for (_, _, got), (_, _, want) in zip(found, expected):
                self.assertTrue(math.isclose(got, want, rel_tol=1e-4), (text, got, want))

        # Unindexed (Lance scores the rows by the formula), then through the index
        # optimize builds.
        for indexed in (False, True):
            if indexed:
                self.assertEqual(self.graph.optimize()["state"], "finished")
            agree("cobalt", "any")
            agree("harbor meadow", "any")
            agree("graph prism", "all")

    def test_errors_carry_the_servers_code_and_evidence(self):
        with self.assertRaises(OmniGraphError) as refused:
            self.graph.query("MATCH (p:Nobody) RETURN p")
        self.assertEqual(refused.exception.status, 400)
        self.assertEqual(refused.exception.code, "bad_query")
        with self.assertRaises(OmniGraphError) as bad:
            self.graph.insert("Person", [{"id": "x", "name": "y", "age": "old"}])
        self.assertEqual(bad.exception.code, "bad_input")
        self.assertEqual(bad.exception.evidence["kind"], "before_effect")
        reader = Graph(self.url, token=self.reader)
        with self.assertRaises(OmniGraphError) as forbidden:
            reader.insert("Company", [{"id": "cx", "name": "No"}])
        self.assertEqual(forbidden.exception.status, 403)
        with self.assertRaises(OmniGraphError) as anonymous:
            Graph(self.url).status()
        self.assertEqual(anonymous.exception.status, 401)


if __name__ == "__main__":
    unittest.main()
