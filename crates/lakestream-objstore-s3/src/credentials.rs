//! Where the S3 backend's credentials come from when [`S3Config`](crate::S3Config) holds no
//! keys: the AWS SDK's default credential chain, looked up in this order on first use and
//! cached (and refreshed before expiry) by the SDK's identity cache:
//!
//! 1. the environment: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`;
//! 2. the shared profile files (`~/.aws/credentials` and `~/.aws/config`, or the files named
//!    by `AWS_SHARED_CREDENTIALS_FILE` and `AWS_CONFIG_FILE`), profile `AWS_PROFILE` or
//!    `default`, including `role_arn` profiles that assume a role through STS;
//! 3. web identity: `AWS_WEB_IDENTITY_TOKEN_FILE` and `AWS_ROLE_ARN` (EKS IAM roles for
//!    service accounts, IRSA), exchanged through STS;
//! 4. the ECS container credentials endpoint (`AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` or
//!    `AWS_CONTAINER_CREDENTIALS_FULL_URI`; also EKS Pod Identity);
//! 5. the EC2 instance metadata service (IMDSv2), unless `AWS_EC2_METADATA_DISABLED=true`.
//!
//! `credential_process` and SSO profiles are not supported (the SDK features are left out
//! to keep the build lean). The chain is the SDK's: it reads the environment and files
//! itself, by design; nothing else in this crate does.

use aws_config::default_provider::credentials::DefaultCredentialsChain;
use aws_credential_types::Credentials;
use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::{ProvideCredentials, future};
use aws_sdk_s3::config::Region;
use tokio::sync::OnceCell;

/// The default chain, built on the first request (building it is async, [`S3Store::new`]
/// is not). The region is the store's, for the STS calls of web identity and role profiles.
///
/// [`S3Store::new`]: crate::S3Store::new
#[derive(Debug)]
pub(crate) struct LazyDefaultChain {
    region: Region,
    chain: OnceCell<DefaultCredentialsChain>,
}

impl LazyDefaultChain {
    pub(crate) fn new(region: Region) -> Self {
        LazyDefaultChain { region, chain: OnceCell::new() }
    }
}

impl ProvideCredentials for LazyDefaultChain {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        future::ProvideCredentials::new(async move {
            let chain = self
                .chain
                .get_or_init(|| DefaultCredentialsChain::builder().region(self.region.clone()).build())
                .await;
            chain.provide_credentials().await
        })
    }

    fn fallback_on_interrupt(&self) -> Option<Credentials> {
        self.chain.get().and_then(ProvideCredentials::fallback_on_interrupt)
    }
}

/// The credentials failure behind an SDK error, if that is what stopped the request. Such a
/// request was never sent (credentials are resolved before the request is signed), so a
/// write that failed this way has not happened.
pub(crate) fn credentials_failure<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> Option<&'a CredentialsError> {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(found) = e.downcast_ref::<CredentialsError>() {
            return Some(found);
        }
        current = e.source();
    }
    None
}
