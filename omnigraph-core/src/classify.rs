//! Classification of `object_store`, Lance and I/O failures into a [`StorageKind`].
//!
//! Only the error's type and variant decide; message text is never parsed, because
//! messages change between releases and differ between stores. Lance's match is
//! exhaustive on purpose: a Lance upgrade that adds a variant fails to compile here
//! until someone decides what it means.

use crate::error::StorageKind;
use std::error::Error as StdError;
use std::io::ErrorKind as IoKind;

/// The kind of an `object_store` failure.
pub(crate) fn object_store_kind(error: &object_store::Error) -> StorageKind {
    use object_store::Error as E;
    match error {
        E::NotFound { .. } => StorageKind::NotFound,
        E::AlreadyExists { .. } | E::Precondition { .. } | E::NotModified { .. } => {
            StorageKind::Precondition
        }
        E::InvalidPath { .. }
        | E::PermissionDenied { .. }
        | E::Unauthenticated { .. }
        | E::UnknownConfigurationKey { .. } => StorageKind::Configuration,
        E::NotSupported { .. } | E::NotImplemented { .. } => StorageKind::Permanent,
        E::Generic { source, .. } => source_kind(source.as_ref()),
        E::JoinError { .. } => StorageKind::Unknown,
        // `object_store::Error` is non-exhaustive.
        _ => StorageKind::Unknown,
    }
}

/// The kind of a Lance failure.
pub(crate) fn lance_kind(error: &lance::Error) -> StorageKind {
    use lance::Error as E;
    match error {
        E::IO { source, .. } | E::Namespace { source, .. } | E::External { source, .. } => {
            source_kind(source.as_ref())
        }
        E::Wrapped { error, .. } => source_kind(error.as_ref()),
        E::Shared { source, .. } => lance_kind(source),
        E::DatasetNotFound { .. }
        | E::NotFound { .. }
        | E::IndexNotFound { .. }
        | E::RefNotFound { .. }
        | E::VersionNotFound { .. } => StorageKind::NotFound,
        E::DatasetAlreadyExists { .. }
        | E::CommitConflict { .. }
        | E::IncompatibleTransaction { .. }
        | E::RefConflict { .. }
        | E::Fenced { .. } => StorageKind::Precondition,
        E::RetryableCommitConflict { .. }
        | E::TooMuchWriteContention { .. }
        | E::Timeout { .. }
        | E::Backpressure { .. } => StorageKind::Transient,
        E::InvalidTableLocation { .. } => StorageKind::Configuration,
        E::InvalidInput { .. }
        | E::SchemaMismatch { .. }
        | E::CorruptFile { .. }
        | E::NotSupported { .. }
        | E::Unprocessable { .. }
        | E::Arrow { .. }
        | E::Schema { .. }
        | E::Index { .. }
        | E::InvalidRef { .. }
        | E::VersionConflict { .. }
        | E::FieldNotFound { .. }
        | E::DiskCapExceeded { .. } => StorageKind::Permanent,
        E::Internal { .. }
        | E::PrerequisiteFailed { .. }
        | E::Stop
        | E::Cloned { .. }
        | E::Execution { .. }
        | E::Cleanup { .. } => StorageKind::Unknown,
    }
}

/// Whether a Lance error says a storage request failed, and of what kind: `Some` when
/// its type (an object-store or I/O error in its source chain, a timeout, a missing
/// object) names a storage failure; `None` when it is about the request itself (a
/// filter that does not parse, a column that does not exist). Callers that take user
/// input use it to tell a throttled read from bad input.
pub fn lance_storage_cause(error: &lance::Error) -> Option<StorageKind> {
    use lance::Error as E;
    match error {
        E::IO { source, .. } | E::Namespace { source, .. } | E::External { source, .. } => {
            storage_source(source.as_ref())
        }
        E::Wrapped { error, .. } => storage_source(error.as_ref()),
        E::Shared { source, .. } => lance_storage_cause(source),
        E::RetryableCommitConflict { .. }
        | E::TooMuchWriteContention { .. }
        | E::Timeout { .. }
        | E::Backpressure { .. } => Some(StorageKind::Transient),
        E::DatasetNotFound { .. } | E::NotFound { .. } | E::VersionNotFound { .. } => {
            Some(StorageKind::NotFound)
        }
        _ => {
            // Lance wraps DataFusion and Arrow failures in other variants; look for a
            // storage error underneath them too.
            let source: &(dyn StdError + 'static) = error;
            source.source().and_then(storage_source)
        }
    }
}

/// The kind of the first object-store or I/O error in a source chain, if any.
fn storage_source(source: &(dyn StdError + 'static)) -> Option<StorageKind> {
    let mut current: Option<&(dyn StdError + 'static)> = Some(source);
    while let Some(error) = current {
        if let Some(store) = error.downcast_ref::<object_store::Error>() {
            return Some(object_store_kind(store));
        }
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            return Some(io_kind(io));
        }
        if let Some(lance) = error.downcast_ref::<lance::Error>() {
            return lance_storage_cause(lance);
        }
        if let Some(crate::error::OmniError::Storage { kind, .. }) =
            error.downcast_ref::<crate::error::OmniError>()
        {
            return Some(*kind);
        }
        current = error.source();
    }
    None
}

/// The kind of a standard I/O failure.
pub(crate) fn io_kind(error: &std::io::Error) -> StorageKind {
    match error.kind() {
        IoKind::NotFound => StorageKind::NotFound,
        IoKind::AlreadyExists => StorageKind::Precondition,
        IoKind::PermissionDenied => StorageKind::Configuration,
        IoKind::TimedOut
        | IoKind::Interrupted
        | IoKind::WouldBlock
        | IoKind::ConnectionReset
        | IoKind::ConnectionAborted
        | IoKind::ConnectionRefused
        | IoKind::NotConnected
        | IoKind::BrokenPipe
        | IoKind::ResourceBusy
        | IoKind::NetworkDown
        | IoKind::NetworkUnreachable
        | IoKind::HostUnreachable => StorageKind::Transient,
        IoKind::InvalidInput
        | IoKind::InvalidData
        | IoKind::Unsupported
        | IoKind::StorageFull
        | IoKind::ReadOnlyFilesystem
        | IoKind::QuotaExceeded
        | IoKind::FileTooLarge => StorageKind::Permanent,
        _ => StorageKind::Unknown,
    }
}

/// The kind of a boxed source: the first error in its chain whose type is known.
pub(crate) fn source_kind(source: &(dyn StdError + 'static)) -> StorageKind {
    let mut current: Option<&(dyn StdError + 'static)> = Some(source);
    while let Some(error) = current {
        if let Some(store) = error.downcast_ref::<object_store::Error>() {
            return object_store_kind(store);
        }
        if let Some(lance) = error.downcast_ref::<lance::Error>() {
            return lance_kind(lance);
        }
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            return io_kind(io);
        }
        if let Some(omni) = error.downcast_ref::<crate::error::OmniError>()
            && let crate::error::OmniError::Storage { kind, .. } = omni
        {
            return *kind;
        }
        current = error.source();
    }
    StorageKind::Unknown
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{ErrorKind, OmniError};

    fn generic(source: Box<dyn StdError + Send + Sync>) -> object_store::Error {
        object_store::Error::Generic {
            store: "test",
            source,
        }
    }

    #[test]
    fn object_store_variants() {
        let not_found = object_store::Error::NotFound {
            path: "a".into(),
            source: "gone".into(),
        };
        assert_eq!(object_store_kind(&not_found), StorageKind::NotFound);
        let exists = object_store::Error::AlreadyExists {
            path: "a".into(),
            source: "there".into(),
        };
        assert_eq!(object_store_kind(&exists), StorageKind::Precondition);
        let denied = object_store::Error::PermissionDenied {
            path: "a".into(),
            source: "no".into(),
        };
        assert_eq!(object_store_kind(&denied), StorageKind::Configuration);
        let unsupported = object_store::Error::NotImplemented {
            operation: "copy".into(),
            implementer: "test".into(),
        };
        assert_eq!(object_store_kind(&unsupported), StorageKind::Permanent);
    }

    #[test]
    fn generic_errors_are_classified_by_their_source_type() {
        let reset = generic(Box::new(std::io::Error::from(IoKind::ConnectionReset)));
        assert_eq!(object_store_kind(&reset), StorageKind::Transient);
        let timeout = generic(Box::new(std::io::Error::from(IoKind::TimedOut)));
        assert_eq!(object_store_kind(&timeout), StorageKind::Transient);
        // Text that looks transient is not read: only the type decides.
        let text = generic("connection reset by peer (timeout)".into());
        assert_eq!(object_store_kind(&text), StorageKind::Unknown);
    }

    #[test]
    fn lance_variants_and_wrapped_sources() {
        let not_found = lance::Error::not_found("t/_versions/1.manifest");
        assert_eq!(lance_kind(&not_found), StorageKind::NotFound);
        let wrapped_store: lance::Error = object_store::Error::Precondition {
            path: "a".into(),
            source: "etag".into(),
        }
        .into();
        assert!(matches!(wrapped_store, lance::Error::IO { .. }));
        assert_eq!(lance_kind(&wrapped_store), StorageKind::Precondition);
        let io: lance::Error =
            lance::Error::io_source(Box::new(std::io::Error::from(IoKind::ConnectionAborted)));
        assert_eq!(lance_kind(&io), StorageKind::Transient);
        let invalid = lance::Error::invalid_input("bad");
        assert_eq!(lance_kind(&invalid), StorageKind::Permanent);
        let internal = lance::Error::internal("bug");
        assert_eq!(lance_kind(&internal), StorageKind::Unknown);
    }

    #[test]
    fn constructors_classify_into_table_rows() {
        let error = OmniError::from_object_store(
            "get _graph/FORMAT",
            object_store::Error::NotFound {
                path: "_graph/FORMAT".into(),
                source: "gone".into(),
            },
        );
        assert_eq!(error.kind(), ErrorKind::Storage(StorageKind::NotFound));
        assert_eq!(error.code().code, "storage_not_found");
        let error = OmniError::from_lance(
            "commit",
            lance::Error::io_source(Box::new(std::io::Error::from(IoKind::TimedOut))),
        );
        assert_eq!(error.code().code, "storage_transient");
        assert_eq!(error.code().exit_code, 75);
        assert!(error.to_string().contains("during commit"));
    }
}
