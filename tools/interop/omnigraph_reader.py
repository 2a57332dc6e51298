"""A second OmniGraph reader, written only from docs/format.md (format version 1).

It reads a graph root on a local folder with pylance: it checks `_graph/FORMAT`, finds a
branch's head at constant cost from the `HEAD` hint (section 6.1), checks the rules of
section 5 a reader relies on in every commit it reads (seq, branch, parent, schema hash,
pins), checks each schema document against its address (section 4), refuses reclaimed commits (section 6.3), knows
the floor below which cleanup reclaimed commit objects (section 8.4), and opens each table at exactly its pinned version
(section 6.2). It shares no code with the engine.
"""

import hashlib
import json
import os
import re

import lance

FORMAT_NAME = "omnigraph"
FORMAT_VERSION = 1
COMMIT_BYTES_MAX = 4 << 20
FORMAT_BYTES_MAX = 64 << 10
SCHEMA_DOCUMENT_BYTES_MAX = 4 << 20
HEAD_PROBE_MAX = 64
BRANCH = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
TABLE_ID = re.compile(r"^[a-z0-9_-]{1,64}$")
SCHEMA_HASH = re.compile(r"^[0-9a-f]{64}$")
DETACHED = 1 << 63
HISTORY_CHUNK = re.compile(r"^(\d{20})-(\d{20})\.jsonl\.gz$")


class FormatError(Exception):
    """The root is not a graph this reader understands, or its state is corrupt."""


class Reclaimed(Exception):
    """The commit is in the log, but cleanup reclaimed its table versions."""


def _read(root, relative, limit):
    path = os.path.join(root, relative)
    if not os.path.exists(path):
        return None
    if os.path.getsize(path) > limit:
        raise FormatError(f"{relative} is larger than {limit} bytes")
    with open(path, "rb") as f:
        return f.read()


def _commit_path(branch, seq):
    return f"_graph/branches/{branch}/commits/{seq:020d}.json"


class Graph:
    def __init__(self, root, branch="main"):
        if not BRANCH.match(branch):
            raise FormatError(f"bad branch name {branch!r}")
        self.root = root
        self.branch = branch
        raw = _read(root, "_graph/FORMAT", FORMAT_BYTES_MAX)
        if raw is None:
            raise FormatError(f"{root} holds no graph (no _graph/FORMAT)")
        doc = json.loads(raw)
        if doc.get("format") != FORMAT_NAME or doc.get("format_version") != FORMAT_VERSION:
            raise FormatError(
                f"format {doc.get('format')!r} version {doc.get('format_version')!r} is not supported"
            )

    def commit(self, seq):
        """Commit `seq` of the branch, validated; None when it does not exist."""
        raw = _read(self.root, _commit_path(self.branch, seq), COMMIT_BYTES_MAX)
        if raw is None:
            return None
        commit = json.loads(raw)
        if commit.get("seq") != seq or commit.get("branch") != self.branch:
            raise FormatError(f"commit {seq}: holds seq {commit.get('seq')} of {commit.get('branch')!r}")
        if (commit["parent_commit_id"] is None) != (seq == 0):
            raise FormatError(f"commit {seq}: only genesis has no parent")
        if not SCHEMA_HASH.match(commit["schema"]):
            raise FormatError(f"commit {seq}: bad schema hash")
        ids, types = set(), set()
        for pin in commit["pins"]:
            if not TABLE_ID.match(pin["table_id"]) or pin["path"] != f"tables/{pin['table_id']}":
                raise FormatError(f"commit {seq}: bad pin {pin}")
            if not (pin["version"] == 1 or pin["version"] >= DETACHED):
                raise FormatError(f"commit {seq}: pin of {pin['table_id']} at a linear version")
            if pin["table_id"] in ids or pin["type_name"] in types:
                raise FormatError(f"commit {seq}: a table or type pinned twice")
            ids.add(pin["table_id"])
            types.add(pin["type_name"])
        return commit

    def _after(self, previous):
        nxt = self.commit(previous["seq"] + 1)
        if nxt is not None and nxt["parent_commit_id"] != previous["commit_id"]:
            raise FormatError(f"commit {nxt['seq']} does not follow commit {previous['seq']}")
        return nxt

    def head(self):
        """The newest commit: the HEAD hint, probed forward (section 6.1)."""
        hint = None
        raw = _read(self.root, f"_graph/branches/{self.branch}/HEAD", COMMIT_BYTES_MAX)
        if raw is not None:
            try:
                doc = json.loads(raw)
                if doc.get("branch") == self.branch and isinstance(doc.get("seq"), int):
                    hint = doc["seq"]
            except ValueError:
                hint = None
        if hint is not None:
            current = self.commit(hint)
            for _ in range(HEAD_PROBE_MAX):
                if current is None:
                    break
                nxt = self._after(current)
                if nxt is None:
                    if self.commit(current["seq"] + 2) is None:
                        return current
                    # n+2 exists: n+1 must too, unless the log has a gap.
                    nxt = self._after(current)
                    if nxt is None:
                        # Below the floor, a leftover of cleanup: the listing decides.
                        if current["seq"] + 1 < self.floor():
                            return self._listed_head()
                        raise FormatError(f"gap at commit {current['seq'] + 1}")
                current = nxt
        return self._listed_head()

    def _listed_head(self):
        folder = os.path.join(self.root, f"_graph/branches/{self.branch}/commits")
        seqs = sorted(
            int(name[:20])
            for name in os.listdir(folder)
            if len(name) == 25 and name.endswith(".json") and name[:20].isdigit()
        )
        if not seqs:
            raise FormatError(f"branch {self.branch} has no commits")
        if seqs != list(range(seqs[-1] + 1)):
            # Commits below the floor were reclaimed (section 8.4): those left are ignored.
            floor = self.floor()
            seqs = [seq for seq in seqs if seq >= floor]
            if seqs != list(range(floor, floor + len(seqs))) or not seqs:
                raise FormatError("the commit log has a gap")
        return self.commit(seqs[-1])

    def floor(self):
        """Where the run of history chunks that starts at seq 0 ends (section 8.4)."""
        folder = os.path.join(self.root, f"_graph/branches/{self.branch}/history")
        if not os.path.isdir(folder):
            return 0
        chunks = sorted(
            (int(m.group(1)), int(m.group(2)))
            for m in (HISTORY_CHUNK.match(name) for name in os.listdir(folder))
            if m and int(m.group(1)) < int(m.group(2))
        )
        floor = 0
        for start, end in chunks:
            if start > floor:
                break
            floor = max(floor, end)
        return floor

    def check_readable(self, seq):
        """Refuses a commit whose table versions cleanup reclaimed (section 6.3): the
        head's `retention` says which."""
        oldest = (self.head().get("retention") or {}).get("oldest_retained", 0)
        if seq < oldest:
            raise Reclaimed(f"commit {seq} was reclaimed; the oldest readable is {oldest}")

    def schema(self, commit):
        """The schema document the commit names, checked against its address (section 4)."""
        relative = f"_graph/schemas/{commit['schema']}.json"
        raw = _read(self.root, relative, SCHEMA_DOCUMENT_BYTES_MAX)
        if raw is None:
            raise FormatError(f"commit {commit['seq']} names a missing schema")
        if hashlib.sha256(raw).hexdigest() != commit["schema"]:
            raise FormatError(f"{relative} does not hash to its name")
        return json.loads(raw)

    def table(self, commit, type_name):
        """The Lance dataset of `type_name` at exactly the version `commit` pins."""
        pin = next(p for p in commit["pins"] if p["type_name"] == type_name)
        return lance.dataset(os.path.join(self.root, pin["path"]), version=pin["version"])

    def snapshot(self, seq=None):
        """{type name: Arrow table} at commit `seq` (the head when None)."""
        if seq is not None:
            self.check_readable(seq)
        commit = self.head() if seq is None else self.commit(seq)
        if commit is None:
            raise FormatError(f"no commit {seq}")
        self.schema(commit)
        tables = {}
        for pin in commit["pins"]:
            data = self.table(commit, pin["type_name"]).to_table()
            if data.num_rows != pin["row_count"]:
                raise FormatError(
                    f"{pin['type_name']} at commit {commit['seq']}: {data.num_rows} rows, the pin says {pin['row_count']}"
                )
            tables[pin["type_name"]] = data
        return commit, tables
