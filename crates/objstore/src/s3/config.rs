//! How an `s3://` store is configured: its credentials (given, or found
//! by the AWS SDK's chain), its region, and how a blocking call waits for
//! the SDK's futures from any thread.

use aws_config::meta::region::RegionProviderChain;
use aws_sdk_s3::config::{BehaviorVersion, Credentials, ProvideCredentials, Region};
use aws_sdk_s3::error::DisplayErrorContext;

use crate::{Result, StoreError};

/// Static credentials for an `s3://` store, given in code instead of
/// found by the AWS SDK's chain ([`S3Store::with`](crate::S3Store::with)). Its `Debug` output
/// shows the key id only.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Credentials {
    /// The access key id.
    pub access_key_id: String,
    /// The secret access key.
    pub secret_access_key: String,
    /// The session token of temporary credentials; they are not renewed:
    /// open the store again with new ones before they expire.
    pub session_token: Option<String>,
}

impl S3Credentials {
    /// Long-term keys (no session token).
    pub fn new(access_key_id: impl Into<String>, secret_access_key: impl Into<String>) -> Self {
        S3Credentials {
            access_key_id: access_key_id.into(),
            secret_access_key: secret_access_key.into(),
            session_token: None,
        }
    }
}

impl std::fmt::Debug for S3Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"** redacted **")
            .field("session_token", &self.session_token.as_ref().map(|_| "** redacted **"))
            .finish()
    }
}

/// Run `f` on `rt` and wait for it. On a thread outside any runtime (the
/// engine's own threads) that is `block_on` on the calling thread. On a
/// thread inside a runtime, `block_on` would panic ("cannot start a runtime
/// from within a runtime"), so `f` runs on a scoped helper thread while
/// the caller waits: correct, at a thread's start-up cost per call.
pub(super) fn block_on<F>(rt: &tokio::runtime::Runtime, f: F) -> F::Output
where
    F: std::future::Future + Send,
    F::Output: Send,
{
    if tokio::runtime::Handle::try_current().is_err() {
        return rt.block_on(f);
    }
    std::thread::scope(|s| {
        let helper = std::thread::Builder::new()
            .name("milliscale-s3-call".into())
            .spawn_scoped(s, || rt.block_on(f))
            .expect("spawn a helper thread for a blocking S3 call");
        helper.join().unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// What `open` hands the SDK's configuration loader.
#[derive(Default)]
pub(super) struct SdkSettings {
    pub(super) endpoint: Option<String>,
    pub(super) region: Option<String>,
    pub(super) profile: Option<String>,
    pub(super) credentials: Option<Credentials>,
}

impl SdkSettings {
    /// The SDK's configuration: region and credentials by the standard
    /// chains (see the module docs), then the credentials resolved once,
    /// so that a store without any fails here with the chain's reasons.
    pub(super) async fn load(&self, url: &str) -> Result<aws_config::SdkConfig> {
        let mut loader =
            aws_config::defaults(BehaviorVersion::latest()).http_client(https_client());
        if let Some(p) = &self.profile {
            loader = loader.profile_name(p);
        }
        if let Some(c) = &self.credentials {
            loader = loader.credentials_provider(c.clone());
        }
        let region = match (&self.region, &self.endpoint) {
            (Some(r), _) => RegionProviderChain::first_try(Region::new(r.clone())),
            // A custom endpoint (the emulator, MinIO) is not on AWS: skip the
            // instance metadata, whose lookup waits for a timeout off AWS.
            (None, Some(_)) => {
                let mut profile = aws_config::profile::ProfileFileRegionProvider::builder();
                if let Some(p) = &self.profile {
                    profile = profile.profile_name(p);
                }
                RegionProviderChain::first_try(
                    aws_config::environment::EnvironmentVariableRegionProvider::new(),
                )
                .or_else(profile.build())
            }
            (None, None) => RegionProviderChain::default_provider(),
        };
        loader = loader.region(region.or_else(Region::from_static("us-east-1")));
        let cfg = loader.load().await;
        let provider = cfg.credentials_provider().ok_or_else(|| {
            StoreError::InvalidRequest(format!("no AWS credentials provider for {url}"))
        })?;
        if let Err(e) = provider.provide_credentials().await {
            return Err(StoreError::InvalidRequest(format!(
                "no AWS credentials for {url}: tried the environment (AWS_ACCESS_KEY_ID, \
                 AWS_SECRET_ACCESS_KEY), the profile files, web identity, the container \
                 endpoint and the instance metadata: {}",
                DisplayErrorContext(&e)
            )));
        }
        Ok(cfg)
    }
}

/// The HTTPS client of every SDK call (S3's, and the credential providers'
/// that go over the network): hyper with rustls on ring, trusting the
/// platform's roots.
fn https_client() -> aws_sdk_s3::config::SharedHttpClient {
    use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
    aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https()
}
