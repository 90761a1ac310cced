//! Oxia and MinIO in Docker, through the testcontainers crate, for machines with Docker
//! (feature `testcontainers`). The images are those of `docker-compose.yml`: Oxia
//! standalone with 4 shards, and MinIO's last published community release with a bucket
//! made by its bundled `mc` client. The containers are removed when dropped.

use std::time::Duration;

use testcontainers::core::{ExecCommand, IntoContainerPort, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};

use crate::env::S3Env;
use crate::{Error, Result};

/// The Oxia image, as in `docker-compose.yml`.
pub const OXIA_IMAGE: (&str, &str) = ("oxia/oxia", "0.17.1");
/// The MinIO image, as in `docker-compose.yml`.
pub const MINIO_IMAGE: (&str, &str) =
    ("quay.io/minio/minio", "RELEASE.2025-09-07T16-13-09Z.hotfix.7aa24e772");

const OXIA_PORT: u16 = 6648;
const MINIO_PORT: u16 = 9000;
const BUCKET: &str = "lakestream";
const ACCESS_KEY: &str = "lakestream";
const SECRET_KEY: &str = "lakestream-secret";

/// Running Oxia and MinIO containers.
pub struct Containers {
    oxia: ContainerAsync<GenericImage>,
    minio: ContainerAsync<GenericImage>,
    /// `host:port` of Oxia.
    pub oxia_addr: String,
    /// The MinIO server, with its bucket made.
    pub s3: S3Env,
}

impl std::fmt::Debug for Containers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Containers")
            .field("oxia", &self.oxia.id())
            .field("minio", &self.minio.id())
            .field("oxia_addr", &self.oxia_addr)
            .field("s3", &self.s3.endpoint)
            .finish()
    }
}

fn docker(what: &str) -> impl Fn(testcontainers::TestcontainersError) -> Error + '_ {
    move |e| Error::new(format!("{what} (is Docker running and can it pull images?): {e}"))
}

impl Containers {
    /// Starts both and makes the bucket.
    pub async fn start() -> Result<Containers> {
        let oxia = GenericImage::new(OXIA_IMAGE.0, OXIA_IMAGE.1)
            .with_exposed_port(OXIA_PORT.tcp())
            .with_wait_for(WaitFor::seconds(3))
            .with_cmd([
                "oxia",
                "standalone",
                "--shards",
                "4",
                "--data-dir",
                "/data/db",
                "--wal-dir",
                "/data/wal",
            ])
            .with_startup_timeout(Duration::from_secs(120))
            .start()
            .await
            .map_err(docker("starting Oxia"))?;
        let minio = GenericImage::new(MINIO_IMAGE.0, MINIO_IMAGE.1)
            .with_exposed_port(MINIO_PORT.tcp())
            .with_wait_for(WaitFor::message_on_either_std("API:"))
            .with_env_var("MINIO_ROOT_USER", ACCESS_KEY)
            .with_env_var("MINIO_ROOT_PASSWORD", SECRET_KEY)
            .with_cmd(["server", "/data"])
            .with_startup_timeout(Duration::from_secs(120))
            .start()
            .await
            .map_err(docker("starting MinIO"))?;
        let mut mb = minio
            .exec(ExecCommand::new([
                "sh",
                "-c",
                &format!(
                    "mc alias set local http://127.0.0.1:{MINIO_PORT} {ACCESS_KEY} {SECRET_KEY} && \
                     mc mb --ignore-existing local/{BUCKET}"
                ),
            ]))
            .await
            .map_err(docker("making the MinIO bucket"))?;
        let output = mb.stdout_to_vec().await.unwrap_or_default();
        if mb.exit_code().await.map_err(docker("making the MinIO bucket"))? != Some(0) {
            return Err(Error::new(format!("mc mb failed: {}", String::from_utf8_lossy(&output))));
        }
        let host = "127.0.0.1";
        let oxia_port = oxia.get_host_port_ipv4(OXIA_PORT).await.map_err(docker("Oxia's port"))?;
        let minio_port = minio.get_host_port_ipv4(MINIO_PORT).await.map_err(docker("MinIO's port"))?;
        Ok(Containers {
            oxia_addr: format!("{host}:{oxia_port}"),
            s3: S3Env {
                endpoint: format!("http://{host}:{minio_port}"),
                bucket: BUCKET.into(),
                access_key: ACCESS_KEY.into(),
                secret_key: SECRET_KEY.into(),
                region: "us-east-1".into(),
            },
            oxia,
            minio,
        })
    }
}
