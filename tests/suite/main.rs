//! The one integration test binary: a module per area, so the workspace links Lance into
//! as few test executables as possible.

// Deep futures (writers -> staging -> publisher -> Lance) exceed the default query
// depth of 128 when their layout is computed.
#![recursion_limit = "256"]

mod adapter_links;
mod adjacency;
mod branches;
mod cleanup;
mod columnar;
mod cost;
mod dst;
mod graph_reads;
mod history;
mod lance_surface;
mod load_budget;
mod maintenance;
mod matrix;
mod merge;
mod mutations;
mod optimize;
mod point_writes;
mod protocol;
mod publish;
mod query;
mod request_counts;
mod reservations;
mod retrieval;
mod s3;
mod schema_apply;
mod server;
mod storage_root;
mod tour;
mod traverse;
mod writers;
