"""A client for graphs served by ``omnigraph serve``.

``Graph(url, token)`` is one served graph (``url`` ends in ``/graphs/<name>``). Queries
come back as ``pyarrow.Table``; writes take a ``pyarrow.Table``, a pandas ``DataFrame``
or a list of dicts. Every failure is an :class:`OmniGraphError` carrying the server's
code, message and evidence.
"""

from __future__ import annotations

import io
import time
import uuid
from typing import Any, Dict, Iterable, Iterator, List, Optional, Union

import pyarrow as pa
import pyarrow.ipc
import requests
import urllib3

__all__ = ["Graph", "OmniGraphError"]

ARROW_STREAM = "application/vnd.apache.arrow.stream"
# Attempts of one request: the first and its retries after a connection error, a 429
# or a retryable 503.
ATTEMPTS_MAX = 4
# The longest wait between attempts, whatever Retry-After says.
RETRY_WAIT_SECONDS_MAX = 5.0


class OmniGraphError(Exception):
    """A request the server refused or failed: its HTTP status, the stable ``code``,
    the ``message``, and the ``evidence`` of what it left behind (``before_effect``,
    ``unpublished``, ``in_doubt``, ``partly_published``)."""

    def __init__(self, status: int, document: Dict[str, Any], retry_after: Optional[float]):
        error = document.get("error", document) if isinstance(document, dict) else {}
        self.status = status
        self.code = error.get("code", "unknown")
        self.message = error.get("message", "")
        self.evidence = error.get("evidence")
        self.document = document
        self.retry_after = retry_after
        super().__init__(f"{status} {self.code}: {self.message}")


Rows = Union[pa.Table, "pandas.DataFrame", List[Dict[str, Any]]]  # noqa: F821


def _arrow_table(rows: Rows) -> pa.Table:
    if isinstance(rows, pa.Table):
        return rows
    if isinstance(rows, list):
        return pa.Table.from_pylist(rows)
    # A pandas DataFrame (pandas is optional: duck-typed, never imported here).
    if hasattr(rows, "to_dict") and hasattr(rows, "columns"):
        return pa.Table.from_pandas(rows, preserve_index=False)
    raise TypeError(f"rows must be a pyarrow.Table, a pandas DataFrame or a list of dicts, not {type(rows)!r}")


def _incomplete(read: Optional[int], expected: int, cause: Optional[Exception]) -> OmniGraphError:
    """An export whose body ended before its last row: the server failed after it began
    (its log says why). Nothing was written: retry."""
    got = "" if read is None else f" after {read} rows"
    message = f"the export ended{got} of {expected}" + (f": {cause}" if cause else "")
    return OmniGraphError(200, {"error": {"code": "export_incomplete", "message": message,
                                          "evidence": {"kind": "before_effect"}}}, None)


class Graph:
    """One served graph."""

    def __init__(self, url: str, token: Optional[str] = None, timeout: float = 60.0,
                 session: Optional[requests.Session] = None):
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.session = session or requests.Session()
        if token is not None:
            self.session.headers["Authorization"] = f"Bearer {token}"

    # The transport ---------------------------------------------------------------

    def _request(self, method: str, path: str, *, json: Any = None, params: Any = None,
                 data: Any = None, headers: Optional[Dict[str, str]] = None,
                 retry: bool = True, stream: bool = False) -> requests.Response:
        """One request. A 429, and a 503 the server says to retry (contention, shutting
        down; never a cancelled maintenance run), are retried after ``Retry-After``; a
        connection error only when ``retry`` (reads, and writes that carry their
        idempotency key, so a retry never writes twice)."""
        # A body that is a stream can be sent once only: never retried.
        retry = retry and (data is None or isinstance(data, (bytes, bytearray)))
        last_error: Optional[Exception] = None
        for attempt in range(ATTEMPTS_MAX):
            try:
                response = self.session.request(method, self.url + path, json=json, params=params,
                                                data=data, headers=headers, timeout=self.timeout,
                                                stream=stream)
            except (requests.ConnectionError, requests.Timeout) as error:
                if not retry or attempt + 1 == ATTEMPTS_MAX:
                    raise
                last_error = error
                time.sleep(min(0.1 * 2 ** attempt, RETRY_WAIT_SECONDS_MAX))
                continue
            if response.status_code < 400:
                return response
            retry_after = response.headers.get("Retry-After")
            wait = float(retry_after) if retry_after else None
            try:
                document = response.json()
            except ValueError:
                document = {"error": {"code": "http_error", "message": response.text}}
            error = OmniGraphError(response.status_code, document, wait)
            if (wait is None or not retry or error.code == "maintenance_cancelled"
                    or attempt + 1 == ATTEMPTS_MAX):
                raise error
            last_error = error
            time.sleep(min(wait, RETRY_WAIT_SECONDS_MAX))
        assert last_error is not None
        raise last_error

    def _json(self, method: str, path: str, **kwargs: Any) -> Dict[str, Any]:
        return self._request(method, path, **kwargs).json()

    def _write(self, path: str, key: Optional[str], **kwargs: Any) -> Dict[str, Any]:
        headers = dict(kwargs.pop("headers", None) or {})
        headers["Idempotency-Key"] = key or str(uuid.uuid4())
        return self._json("POST", path, headers=headers, **kwargs)

    # Reads ----------------------------------------------------------------------

    def query(self, cypher: str, *, branch: Optional[str] = None, at: Union[int, str, None] = None,
              **params: Any) -> pa.Table:
        """Runs a Cypher query (``$name`` parameters from ``params``) at the branch's
        head, or at commit ``at`` (a seq or an id), and returns its rows."""
        body: Dict[str, Any] = {"query": cypher, "params": params}
        if branch is not None:
            body["branch"] = branch
        if at is not None:
            body["at"] = str(at)
        response = self._request("POST", "/query", json=body, headers={"Accept": ARROW_STREAM})
        return pyarrow.ipc.open_stream(response.content).read_all()

    def _export(self, type_name: str, branch: Optional[str],
                at: Union[int, str, None]) -> requests.Response:
        params: Dict[str, Any] = {}
        if branch is not None:
            params["branch"] = branch
        if at is not None:
            params["at"] = str(at)
        response = self._request("GET", f"/export/{requests.utils.quote(type_name, safe='')}",
                                 params=params, headers={"Accept": ARROW_STREAM}, stream=True)
        response.raw.decode_content = True
        return response

    def export_batches(self, type_name: str, *, branch: Optional[str] = None,
                       at: Union[int, str, None] = None) -> Iterator[pa.RecordBatch]:
        """Every row of one type at the branch's head or commit ``at``, as record
        batches while they stream: a table of any size in the memory of a few batches.
        A body cut off before its last row raises :class:`OmniGraphError`
        (``export_incomplete``), never ends as a short table. A generator: a refusal
        (a 404, say) raises at the first batch."""
        with self._export(type_name, branch, at) as response:
            expected = int(response.headers["x-omnigraph-rows"])
            read = 0
            try:
                for batch in pyarrow.ipc.open_stream(response.raw):
                    read += batch.num_rows
                    yield batch
            except (requests.RequestException, urllib3.exceptions.HTTPError, pa.ArrowInvalid) as error:
                raise _incomplete(read, expected, error) from error
            if read != expected:
                raise _incomplete(read, expected, None)

    def export(self, type_name: str, *, branch: Optional[str] = None,
               at: Union[int, str, None] = None) -> pa.Table:
        """Every row of one type at the branch's head or commit ``at``, in the type's
        columns (an empty table has them too); see :meth:`export_batches`."""
        with self._export(type_name, branch, at) as response:
            expected = int(response.headers["x-omnigraph-rows"])
            try:
                table = pyarrow.ipc.open_stream(response.raw).read_all()
            except (requests.RequestException, urllib3.exceptions.HTTPError, pa.ArrowInvalid) as error:
                raise _incomplete(None, expected, error) from error
            if table.num_rows != expected:
                raise _incomplete(table.num_rows, expected, None)
            return table

    def schema(self, branch: Optional[str] = None) -> Dict[str, Any]:
        return self._json("GET", "/schema", params={"branch": branch} if branch else None)

    def status(self, branch: Optional[str] = None) -> Dict[str, Any]:
        return self._json("GET", "/status", params={"branch": branch} if branch else None)

    def commits(self, limit: int = 20, branch: Optional[str] = None) -> List[Dict[str, Any]]:
        params: Dict[str, Any] = {"limit": limit}
        if branch is not None:
            params["branch"] = branch
        return self._json("GET", "/commits", params=params)["commits"]

    def tables(self, at: Union[int, str, None] = None, branch: Optional[str] = None) -> List[Dict[str, Any]]:
        params: Dict[str, Any] = {}
        if at is not None:
            params["at"] = str(at)
        if branch is not None:
            params["branch"] = branch
        return self._json("GET", "/tables", params=params)["tables"]

    # Writes ---------------------------------------------------------------------

    def write(self, type_name: str, rows: Rows, *, mode: str = "append", branch: Optional[str] = None,
              idempotency_key: Optional[str] = None) -> Dict[str, Any]:
        """Writes rows of one type in one commit, as an Arrow IPC file: ``append``
        (every key new) or ``merge`` (upsert by key). Returns ``{commit, rows}``."""
        table = _arrow_table(rows)
        sink = io.BytesIO()
        with pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        params: Dict[str, Any] = {"format": "arrow", "type": type_name, "mode": mode}
        if branch is not None:
            params["branch"] = branch
        return self._write("/load", idempotency_key, params=params, data=sink.getvalue(),
                           headers={"Content-Type": "application/vnd.apache.arrow.file"})

    def insert(self, type_name: str, rows: Rows, *, branch: Optional[str] = None,
               idempotency_key: Optional[str] = None) -> Dict[str, Any]:
        """Inserts rows of one type as JSON (an edge without an ``id`` gets one)."""
        objects = rows if isinstance(rows, list) else _arrow_table(rows).to_pylist()
        body: Dict[str, Any] = {"type": type_name, "rows": objects}
        if branch is not None:
            body["branch"] = branch
        return self._write("/insert", idempotency_key, json=body)

    def load(self, data: Union[bytes, Iterable[bytes]], *, format: str = "jsonl",
             type_name: Optional[str] = None, mode: str = "append", branch: Optional[str] = None,
             idempotency_key: Optional[str] = None) -> Dict[str, Any]:
        """Loads a file's bytes (JSONL, CSV, Parquet or Arrow IPC) in one commit."""
        params: Dict[str, Any] = {"format": format, "mode": mode}
        if type_name is not None:
            params["type"] = type_name
        if branch is not None:
            params["branch"] = branch
        return self._write("/load", idempotency_key, params=params, data=data)

    def update(self, type_name: str, where: str, set: Dict[str, Any], *, branch: Optional[str] = None,
               idempotency_key: Optional[str] = None) -> Dict[str, Any]:
        body: Dict[str, Any] = {"type": type_name, "where": where, "set": set}
        if branch is not None:
            body["branch"] = branch
        return self._write("/update", idempotency_key, json=body)

    def delete(self, type_name: str, where: str, *, branch: Optional[str] = None,
               idempotency_key: Optional[str] = None) -> Dict[str, Any]:
        body: Dict[str, Any] = {"type": type_name, "where": where}
        if branch is not None:
            body["branch"] = branch
        return self._write("/delete", idempotency_key, json=body)

    # Branches ---------------------------------------------------------------------

    def branches(self) -> List[Dict[str, Any]]:
        return self._json("GET", "/branches")["branches"]

    def create_branch(self, name: str, *, from_branch: Optional[str] = None,
                      at: Union[int, str, None] = None) -> Dict[str, Any]:
        body: Dict[str, Any] = {"name": name}
        if from_branch is not None:
            body["from"] = from_branch
        if at is not None:
            body["at"] = str(at)
        return self._json("POST", "/branches", json=body, retry=False)

    def delete_branch(self, name: str) -> Dict[str, Any]:
        return self._json("DELETE", f"/branches/{requests.utils.quote(name, safe='')}", retry=False)

    def merge(self, source: str, *, into: Optional[str] = None, dry_run: bool = False,
              idempotency_key: Optional[str] = None) -> Dict[str, Any]:
        body: Dict[str, Any] = {"source": source, "dry_run": dry_run}
        if into is not None:
            body["into"] = into
        return self._write("/merge", idempotency_key, json=body)

    # Maintenance ------------------------------------------------------------------

    def optimize(self, *, wait: bool = True, branch: Optional[str] = None) -> Dict[str, Any]:
        """Starts optimize (or joins the run going); with ``wait``, returns the finished
        run and raises when it failed or was cancelled."""
        params: Dict[str, Any] = {"wait": "true" if wait else "false"}
        if branch is not None:
            params["branch"] = branch
        return self._json("POST", "/maintenance/optimize", params=params, retry=False)

    def cleanup(self, *, keep: Optional[int] = None, older_than_seconds: Optional[int] = None,
                grace_seconds: Optional[int] = None, confirm: bool = False, wait: bool = True) -> Dict[str, Any]:
        """Starts cleanup, a preview unless ``confirm``; see :meth:`optimize`."""
        body: Dict[str, Any] = {"confirm": confirm}
        for name, value in (("keep", keep), ("older_than_seconds", older_than_seconds),
                            ("grace_seconds", grace_seconds)):
            if value is not None:
                body[name] = value
        return self._json("POST", "/maintenance/cleanup", params={"wait": "true" if wait else "false"},
                          json=body, retry=False)

    def run(self, run_id: str, *, wait: bool = False) -> Dict[str, Any]:
        return self._json("GET", f"/maintenance/runs/{run_id}", params={"wait": "true" if wait else "false"})

    def cancel(self, run_id: str) -> Dict[str, Any]:
        return self._json("POST", f"/maintenance/runs/{run_id}/cancel", retry=False)
