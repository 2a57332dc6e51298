//! Every limit of the server (`*_MAX`), and the [`Limits`] an operator can change.

use std::time::Duration;

/// Default most bytes of a JSON request body (queries, inserts, updates).
pub const REQUEST_BODY_BYTES_MAX: usize = 16 << 20;
/// Default most bytes of a load's body (it is spooled to a temporary file as it
/// arrives, never held in memory).
pub const LOAD_BODY_BYTES_MAX: u64 = 4 << 30;
/// Default most time a query may take, planning and reading its rows.
pub const QUERY_TIME_MAX: Duration = Duration::from_secs(30);
/// Default most memory a query's rows may take (their Arrow buffers) while the server
/// gathers its answer: past it the query stops, 422 `result_too_large`. The export
/// route streams a whole type instead, in bounded memory.
pub const QUERY_RESULT_BYTES_MAX: usize = 64 << 20;
/// Default most time a client may pause between two chunks of a request's body (a
/// client too slow to send its body ends here, 408).
pub const REQUEST_TIME_MAX: Duration = Duration::from_secs(600);
/// Default most time a client may take to send a request's line and headers, from when
/// the server starts waiting for them (hyper's header-read timeout: on a new connection
/// and after each response, so a keep-alive connection idle this long is closed too):
/// past it, the connection is closed.
pub const HEADER_READ_TIME_MAX: Duration = Duration::from_secs(30);
/// Default most requests one token has in flight; past it, 429.
pub const TOKEN_CONCURRENT_REQUESTS_MAX: usize = 32;
/// The highest request rate per token an operator can set (`--requests-per-second`).
pub const TOKEN_REQUESTS_PER_SECOND_MAX: u32 = 1_000_000;
/// Default most requests the server has in flight without a token (`--insecure-no-auth`).
pub const ANONYMOUS_CONCURRENT_REQUESTS_MAX: usize = 256;
/// Finished maintenance runs kept for their status route, per server (the oldest
/// finished one goes first).
pub const FINISHED_RUNS_KEPT_MAX: usize = 64;
/// Branch handles kept warm per graph; a request for another branch opens a handle of
/// its own.
pub const BRANCH_HANDLES_KEPT_MAX: usize = 64;
/// Most tokens a tokens file may hold.
pub const TOKENS_MAX: usize = 10_000;
/// Most bytes of a tokens file.
pub const TOKEN_FILE_BYTES_MAX: u64 = 4 << 20;
/// Commits of a branch read back for their idempotency keys when a server first meets
/// the branch: a key is honoured while its commit is among the newest this many.
pub const IDEMPOTENCY_WINDOW_COMMITS_MAX: usize = 1_024;
/// Idempotency keys a server keeps per branch (the oldest indexed goes first).
pub const IDEMPOTENCY_KEYS_KEPT_MAX: usize = 16_384;
/// Branches whose idempotency keys a server keeps indexed (past it, one branch's index
/// is dropped and read again when next needed).
pub const IDEMPOTENCY_BRANCHES_KEPT_MAX: usize = 256;
/// Most inserts one round of group commit publishes in one commit (`crate::group`).
pub const GROUP_INSERTS_MAX: usize = 64;
/// How long a round of group commit waits for inserts after a round that gathered
/// several (a sign of writers that wait for their answers): the time a client takes to
/// send its next insert over loopback or a LAN.
pub const GROUP_GATHER_TIME: Duration = Duration::from_millis(2);
/// Most rows one round of group commit gathers (one ingest batch: a round's rows are
/// all checked before any is staged); an insert with more runs in a round of its own.
pub const GROUP_INSERT_ROWS_MAX: usize = omnigraph_graph::limits::INGEST_BATCH_ROWS_MAX;
/// Most bytes of a served graph's name.
pub const GRAPH_NAME_BYTES_MAX: usize = 64;
/// Most commits one log request returns (the log's own page bound applies too).
pub const LOG_LIMIT_MAX: usize = 1_000;
/// Most errors followed down a failure's chain of sources.
pub const ERROR_CHAIN_DEPTH_MAX: usize = 16;
/// Seconds a client is told to wait after a 429 or a retryable 503.
pub const RETRY_AFTER_SECONDS_MAX: u64 = 1;

/// The bounds a server enforces. [`Limits::default`] has every default above.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Most bytes of a JSON request body (413 past it).
    pub request_body_bytes: usize,
    /// Most bytes of a load's body (413 past it; nothing is published).
    pub load_body_bytes: u64,
    /// Most time a query may take (503 `query_time_exceeded` past it).
    pub query_time: Duration,
    /// The memory budget of each query (the query crate's default when `None`).
    pub query_memory_bytes: Option<usize>,
    /// Most memory a query's rows take while its answer is gathered (422
    /// `result_too_large` past it).
    pub query_result_bytes: usize,
    /// Most time a client may pause between two chunks of a body (408 past it).
    pub request_time: Duration,
    /// Most time a client may take to send a request's headers (the connection is
    /// closed past it).
    pub header_read_time: Duration,
    /// Most requests one token has in flight (429 past it).
    pub token_concurrent_requests: usize,
    /// Most requests one token makes per second, with bursts of as many (429 past
    /// it); none when `None`. At least 1 and at most [`TOKEN_REQUESTS_PER_SECOND_MAX`].
    pub token_requests_per_second: Option<u32>,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            request_body_bytes: REQUEST_BODY_BYTES_MAX,
            load_body_bytes: LOAD_BODY_BYTES_MAX,
            query_time: QUERY_TIME_MAX,
            query_memory_bytes: None,
            query_result_bytes: QUERY_RESULT_BYTES_MAX,
            request_time: REQUEST_TIME_MAX,
            header_read_time: HEADER_READ_TIME_MAX,
            token_concurrent_requests: TOKEN_CONCURRENT_REQUESTS_MAX,
            token_requests_per_second: None,
        }
    }
}

// A round's commit records each of its inserts' keys.
const _: () =
    assert!(GROUP_INSERTS_MAX <= omnigraph_publish::limits::IDEMPOTENCY_KEYS_PER_COMMIT_MAX);
