//! The storage root and the object-store wrapper every request in it passes through.

mod local_links;
mod local_reads;
mod options;
mod root;
#[cfg(feature = "s3")]
mod s3;
mod wrapper;

pub use options::StorageOptions;
pub use root::{ObjectInfo, PutIfAbsentCheck, PutOutcome, RootLocation, StorageRoot};
pub use wrapper::{
    FaultAction, FaultHandle, FaultRule, Request, RequestCounts, RequestKind, RequestProbe,
};
