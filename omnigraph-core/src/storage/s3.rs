//! S3-compatible roots without Lance's `aws` feature (which brings the AWS SDK and
//! OpenDAL): `object_store`'s own S3 client, configured from the `AWS_*` environment
//! and the root's storage options, sends its requests through the reqwest client that
//! Lance already links, and is handed to Lance as the provider of the `s3` scheme.
//! The root's wrapper (request counting, faults) applies to it like to any store.

use super::options::StorageOptions;
use crate::error::{OmniError, Result, StorageKind};
use http_body_util::BodyExt;
use lance::io::{ObjectStore as LanceStore, ObjectStoreParams};
use lance_io::object_store::ObjectStoreProvider;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::client::{
    ClientConfigKey, ClientOptions, HttpClient, HttpConnector, HttpError, HttpErrorKind,
    HttpRequest, HttpResponse, HttpResponseBody, HttpService,
};
use std::str::FromStr;
use std::sync::Arc;

/// Requests in flight per store, as Lance's own S3 provider sets it.
const S3_IO_PARALLELISM: usize = 64;
/// Retries of a failed ranged read, as Lance's default.
const S3_DOWNLOAD_RETRIES: usize = 3;
/// How long connecting may take.
const S3_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// How long one request may take, body included.
const S3_REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Checks that every option names an S3 setting `object_store` knows and this build
/// honours: of the HTTP client's settings only `allow_http` is (the client is reqwest's,
/// with this module's timeouts), so the others are refused rather than ignored.
pub(crate) fn check_options(options: &StorageOptions) -> Result<()> {
    for key in options.keys() {
        let refuse = |why: String| {
            OmniError::storage(
                StorageKind::Configuration,
                format!("storage option {key}"),
                why.into(),
            )
        };
        match AmazonS3ConfigKey::from_str(key) {
            Err(_) => {
                return Err(refuse(format!(
                    "{key} is not an S3 setting (try endpoint, region, allow_http, \
                     access_key_id, secret_access_key, session_token)"
                )));
            }
            Ok(AmazonS3ConfigKey::Client(ClientConfigKey::AllowHttp)) => {}
            Ok(AmazonS3ConfigKey::Client(_)) => {
                return Err(refuse(format!(
                    "{key} is an HTTP client setting this build does not apply \
                     (only allow_http is)"
                )));
            }
            Ok(_) => {}
        }
    }
    Ok(())
}

/// Whether `object_store` reads `value` as true.
fn is_truthy(value: &str) -> bool {
    matches!(
        value.trim().to_ascii_lowercase().as_str(),
        "1" | "true" | "on" | "yes" | "y"
    )
}

/// The provider of `s3://` stores for one root.
#[derive(Debug)]
pub(crate) struct S3Provider {
    options: StorageOptions,
}

impl S3Provider {
    pub(crate) fn new(options: StorageOptions) -> S3Provider {
        S3Provider { options }
    }
}

#[async_trait::async_trait]
impl ObjectStoreProvider for S3Provider {
    async fn new_store(
        &self,
        base_path: url::Url,
        params: &ObjectStoreParams,
    ) -> lance::Result<LanceStore> {
        let bucket = base_path.host_str().unwrap_or_default().to_string();
        let mut builder = AmazonS3Builder::from_env()
            .with_bucket_name(&bucket)
            .with_http_connector(ReqwestConnector);
        for (key, value) in self.options.iter() {
            let key = AmazonS3ConfigKey::from_str(key)
                .map_err(|error| lance::Error::invalid_input(error.to_string()))?;
            builder = builder.with_config(key, value);
        }
        let store = builder
            .build()
            .map_err(|error| lance::Error::invalid_input(format!("S3 settings: {error}")))?;
        let mut lance_store = LanceStore::new(
            Arc::new(store),
            base_path.clone(),
            params.block_size,
            None,
            false,
            true,
            S3_IO_PARALLELISM,
            S3_DOWNLOAD_RETRIES,
            None,
        );
        lance_store.store_prefix = self.calculate_object_store_prefix(&base_path, None)?;
        Ok(lance_store)
    }
}

/// Makes `object_store`'s S3 client send its requests with reqwest 0.12 (already in the
/// build through Lance, with rustls and the ring provider), not a second HTTP stack.
#[derive(Debug)]
struct ReqwestConnector;

impl HttpConnector for ReqwestConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let allow_http = options
            .get_config_value(&ClientConfigKey::AllowHttp)
            .is_some_and(|value| is_truthy(&value));
        let client = reqwest::Client::builder()
            .connect_timeout(S3_CONNECT_TIMEOUT)
            .timeout(S3_REQUEST_TIMEOUT)
            .https_only(!allow_http)
            .build()
            .map_err(|error| object_store::Error::Generic {
                store: "S3",
                source: Box::new(error),
            })?;
        Ok(HttpClient::new(Reqwest(client)))
    }
}

#[derive(Debug)]
struct Reqwest(reqwest::Client);

#[async_trait::async_trait]
impl HttpService for Reqwest {
    async fn call(&self, request: HttpRequest) -> std::result::Result<HttpResponse, HttpError> {
        let (parts, body) = request.into_parts();
        let url = reqwest::Url::parse(&parts.uri.to_string())
            .map_err(|error| HttpError::new(HttpErrorKind::Request, error))?;
        let mut outgoing = reqwest::Request::new(parts.method, url);
        *outgoing.headers_mut() = parts.headers;
        *outgoing.body_mut() = Some(reqwest::Body::wrap(body));
        let response = self.0.execute(outgoing).await.map_err(http_error)?;
        let response: http::Response<reqwest::Body> = response.into();
        let (parts, body) = response.into_parts();
        Ok(HttpResponse::from_parts(
            parts,
            HttpResponseBody::new(body.map_err(http_error)),
        ))
    }
}

/// Classifies a reqwest failure as `object_store` does its own client's: a failure to
/// connect is retried; a timeout or a connection cut mid-transfer (`Interrupted`) only
/// for an idempotent request, since the request may have been applied; anything else
/// is not retried.
fn http_error(error: reqwest::Error) -> HttpError {
    let kind = if error.is_timeout() {
        HttpErrorKind::Timeout
    } else if error.is_connect() {
        HttpErrorKind::Connect
    } else if error.is_decode() {
        HttpErrorKind::Decode
    } else {
        interrupted_or_unknown(&error)
    };
    HttpError::new(kind, error.without_url())
}

/// A connection reset or cut short mid-transfer is `Interrupted` (retried); anything
/// else stays `Unknown`.
fn interrupted_or_unknown(error: &reqwest::Error) -> HttpErrorKind {
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind;
            if matches!(
                io.kind(),
                ErrorKind::ConnectionAborted
                    | ErrorKind::ConnectionReset
                    | ErrorKind::BrokenPipe
                    | ErrorKind::UnexpectedEof
            ) {
                return HttpErrorKind::Interrupted;
            }
        }
        source = cause.source();
    }
    HttpErrorKind::Unknown
}
