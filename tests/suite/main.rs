//! The one integration test binary: a module per area, so the workspace links Lance into
//! as few test executables as possible.

mod adapter_links;
mod lance_surface;
mod request_counts;
mod storage_root;
