//! Bucket lifecycle rules (feature `lifecycle`): let the store itself expire objects under a
//! prefix and abort abandoned multipart uploads.
//!
//! Lakestream deletes its objects itself, following the reclamation rules of the spec; a
//! lifecycle rule is a backstop for what a crashed writer leaves behind (incomplete multipart
//! uploads, scratch prefixes). Never put an expiration rule on a WAL or compacted root: the
//! store would delete objects that index records still name.
//!
//! These are administrative calls: they are not retried, and they replace the bucket's whole
//! lifecycle configuration, as S3's API does.

use aws_sdk_s3::types::{
    AbortIncompleteMultipartUpload, BucketLifecycleConfiguration, ExpirationStatus, LifecycleExpiration,
    LifecycleRule as SdkRule, LifecycleRuleFilter,
};
use lakestream_objstore::{ObjectPrefix, ObjectResult, ObjectStoreError};

use crate::store::{S3Store, classify};

/// One lifecycle rule over the keys below the store's root that start with `prefix`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LifecycleRule {
    /// The rule's id, unique within the bucket.
    pub id: String,
    /// The objects (relative to the store's root) the rule applies to.
    pub prefix: ObjectPrefix,
    /// Delete objects this many days after they were written.
    pub expire_after_days: Option<i32>,
    /// Abort multipart uploads not completed this many days after they started.
    pub abort_incomplete_multipart_after_days: Option<i32>,
}

impl S3Store {
    /// Replaces the bucket's lifecycle configuration with `rules`.
    pub async fn put_lifecycle_rules(&self, rules: &[LifecycleRule]) -> ObjectResult<()> {
        let configuration = self.lifecycle_configuration(rules)?;
        self.client()
            .put_bucket_lifecycle_configuration()
            .bucket(self.root().bucket())
            .lifecycle_configuration(configuration)
            .send()
            .await
            .map(drop)
            .map_err(|e| classify(&e, "put_lifecycle", self.root().bucket(), false))
    }

    /// Removes the bucket's lifecycle configuration.
    pub async fn delete_lifecycle_rules(&self) -> ObjectResult<()> {
        self.client()
            .delete_bucket_lifecycle()
            .bucket(self.root().bucket())
            .send()
            .await
            .map(drop)
            .map_err(|e| classify(&e, "delete_lifecycle", self.root().bucket(), false))
    }

    /// The SDK form of `rules`, with prefixes made absolute within the bucket.
    pub fn lifecycle_configuration(
        &self,
        rules: &[LifecycleRule],
    ) -> ObjectResult<BucketLifecycleConfiguration> {
        let invalid = |reason: String| ObjectStoreError::InvalidConfig { field: "lifecycle_rules", reason };
        let mut builder = BucketLifecycleConfiguration::builder();
        for rule in rules {
            if rule.expire_after_days.is_none() && rule.abort_incomplete_multipart_after_days.is_none() {
                return Err(invalid(format!("rule {:?} has no action", rule.id)));
            }
            if rule
                .expire_after_days
                .into_iter()
                .chain(rule.abort_incomplete_multipart_after_days)
                .any(|d| d < 1)
            {
                return Err(invalid(format!("rule {:?}: days must be at least 1", rule.id)));
            }
            let sdk_rule = SdkRule::builder()
                .id(&rule.id)
                .status(ExpirationStatus::Enabled)
                .filter(
                    LifecycleRuleFilter::builder().prefix(self.root().key_prefix_of(&rule.prefix)).build(),
                )
                .set_expiration(
                    rule.expire_after_days.map(|days| LifecycleExpiration::builder().days(days).build()),
                )
                .set_abort_incomplete_multipart_upload(rule.abort_incomplete_multipart_after_days.map(
                    |days| AbortIncompleteMultipartUpload::builder().days_after_initiation(days).build(),
                ))
                .build()
                .map_err(|e| invalid(e.to_string()))?;
            builder = builder.rules(sdk_rule);
        }
        builder.build().map_err(|e| invalid(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::S3Config;

    fn store() -> S3Store {
        S3Store::new(S3Config { bucket: "b-1".into(), prefix: Some("tenant".into()), ..S3Config::default() })
            .unwrap()
    }

    #[test]
    fn rules_apply_below_the_root() {
        let rule = LifecycleRule {
            id: "scratch".into(),
            prefix: ObjectPrefix::new("scratch/").unwrap(),
            expire_after_days: Some(3),
            abort_incomplete_multipart_after_days: Some(1),
        };
        let configuration = store().lifecycle_configuration(&[rule]).unwrap();
        let sdk_rule = &configuration.rules()[0];
        assert_eq!(sdk_rule.filter().and_then(|f| f.prefix()), Some("tenant/scratch/"));
        assert_eq!(sdk_rule.expiration().and_then(|e| e.days()), Some(3));
        assert_eq!(
            sdk_rule.abort_incomplete_multipart_upload().and_then(|a| a.days_after_initiation()),
            Some(1)
        );
        assert_eq!(sdk_rule.status(), &ExpirationStatus::Enabled);
    }

    #[test]
    fn a_rule_without_an_action_is_invalid() {
        let rule = LifecycleRule {
            id: "idle".into(),
            prefix: ObjectPrefix::all(),
            expire_after_days: None,
            abort_incomplete_multipart_after_days: None,
        };
        let err = store().lifecycle_configuration(&[rule]).unwrap_err();
        assert!(matches!(err, ObjectStoreError::InvalidConfig { field: "lifecycle_rules", .. }), "{err}");
    }
}
