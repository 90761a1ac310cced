//! Credentials from the AWS default chain against a real S3 server (s3s-fs in
//! `scripts/test`, or any server given by `LAKESTREAM_TEST_S3_*`): an `S3Config` without
//! keys signs its requests with the keys the chain finds in the environment or in a shared
//! profile file, and with none anywhere it fails without sending a request.
//!
//! The chain reads the process environment, which a test may not change in-process, so
//! this is a test without the libtest harness: `main` runs each case in a child process of
//! this same binary, with exactly the environment the case names (everything else cleared,
//! `HOME` an empty directory, instance metadata off), and checks how the child ended.

use std::path::Path;
use std::process::{Command, Output};

use bytes::Bytes;
use lakestream_objstore::conformance::unique_run_prefix;
use lakestream_objstore::{ObjectPath, ObjectStore};
use lakestream_objstore_s3::{S3Config, S3Store, testkit};

/// Set in a child: run the round trip with the chain and report.
const CHILD: &str = "LAKESTREAM_CREDENTIAL_CHAIN_CHILD";
/// A child's exit code when the round trip failed (the error is on stderr).
const FAILED: i32 = 3;

const HOW_TO_START: &str = "the S3 tests need a running s3s-fs server: run `scripts/test`, or start one with \
     `source scripts/servers.sh && start_s3 $(mktemp -d)` in the repository root and run cargo test in that shell";

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set; {HOW_TO_START}"))
}

fn main() {
    if std::env::var_os(CHILD).is_some() {
        std::process::exit(child());
    }
    let key = var("LAKESTREAM_TEST_S3_ACCESS_KEY");
    let secret = var("LAKESTREAM_TEST_S3_SECRET_KEY");
    let home = tempfile::tempdir().unwrap();
    let aws = home.path().join(".aws");
    std::fs::create_dir_all(&aws).unwrap();
    let mut failures = Vec::new();
    let mut check = |name: &str, ok: bool, out: &Output| {
        let stderr = String::from_utf8_lossy(&out.stderr);
        if ok {
            println!("credential_chain: {name} ... ok");
        } else {
            println!("credential_chain: {name} ... FAILED (exit {:?})\n{stderr}", out.status.code());
            failures.push(name.to_owned());
        }
    };

    // 1. The environment: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
    let out = run(home.path(), &[("AWS_ACCESS_KEY_ID", &key), ("AWS_SECRET_ACCESS_KEY", &secret)]);
    check("keys from the environment", out.status.success(), &out);

    // The keys are really used: a wrong secret in the environment is refused by the server.
    let out = run(home.path(), &[("AWS_ACCESS_KEY_ID", &key), ("AWS_SECRET_ACCESS_KEY", "not-the-secret")]);
    check("a wrong secret in the environment is refused by the server", refused_by_server(&out), &out);

    // 2. The shared credentials file at its default place, ~/.aws/credentials, profile default.
    std::fs::write(
        aws.join("credentials"),
        format!("[default]\naws_access_key_id = {key}\naws_secret_access_key = {secret}\n"),
    )
    .unwrap();
    let out = run(home.path(), &[]);
    check("keys from ~/.aws/credentials (profile default)", out.status.success(), &out);
    std::fs::remove_file(aws.join("credentials")).unwrap();

    // 3. A named profile in a file named by AWS_SHARED_CREDENTIALS_FILE; the default profile
    //    there holds a wrong secret, so only the selected profile can pass.
    let file = home.path().join("lakestream-credentials");
    std::fs::write(
        &file,
        format!(
            "[default]\naws_access_key_id = {key}\naws_secret_access_key = not-the-secret\n\n\
             [lakestream-ops]\naws_access_key_id = {key}\naws_secret_access_key = {secret}\n"
        ),
    )
    .unwrap();
    let file = file.to_str().unwrap().to_owned();
    let out = run(home.path(), &[("AWS_SHARED_CREDENTIALS_FILE", &file), ("AWS_PROFILE", "lakestream-ops")]);
    check("keys from profile AWS_PROFILE in AWS_SHARED_CREDENTIALS_FILE", out.status.success(), &out);
    let out = run(home.path(), &[("AWS_SHARED_CREDENTIALS_FILE", &file)]);
    check(
        "that file's default profile (a wrong secret) is refused by the server",
        refused_by_server(&out),
        &out,
    );

    // 4. No credentials anywhere: the request fails before it is sent, naming credentials,
    //    and is not sent unsigned.
    let out = run(home.path(), &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    check(
        "no credentials anywhere fails without sending the request",
        out.status.code() == Some(FAILED)
            && stderr.contains("no S3 credentials")
            && !stderr.contains("OutcomeUnknown"),
        &out,
    );

    if !failures.is_empty() {
        println!("credential_chain: {} case(s) failed: {}", failures.len(), failures.join("; "));
        std::process::exit(1);
    }
    println!("credential_chain: all cases passed");
}

/// The child failed on the server's answer (a signature it refused), not for want of
/// credentials.
fn refused_by_server(out: &Output) -> bool {
    let stderr = String::from_utf8_lossy(&out.stderr);
    out.status.code() == Some(FAILED) && !stderr.contains("no S3 credentials") && stderr.contains("Signature")
}

/// Runs this binary as a child with only `vars` (and the server's address) set.
fn run(home: &Path, vars: &[(&str, &str)]) -> Output {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .env_clear()
        .env(CHILD, "1")
        .env("HOME", home)
        // Nothing from outside the case: no instance metadata, no other files.
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_CONFIG_FILE", home.join("no-such-config"))
        .env("LAKESTREAM_TEST_S3_ENDPOINT", var("LAKESTREAM_TEST_S3_ENDPOINT"))
        .env("LAKESTREAM_TEST_S3_BUCKET", var("LAKESTREAM_TEST_S3_BUCKET"))
        .env("LAKESTREAM_TEST_S3_REGION", var("LAKESTREAM_TEST_S3_REGION"));
    if let Ok(mode) = std::env::var("LAKESTREAM_TEST_S3_CONDITIONAL_PUT") {
        command.env("LAKESTREAM_TEST_S3_CONDITIONAL_PUT", mode);
    }
    for (name, value) in vars {
        command.env(name, value);
    }
    command.output().expect("run the child")
}

/// In the child: put, get and delete one object through a store configured without keys.
fn child() -> i32 {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let config = S3Config {
        bucket: var("LAKESTREAM_TEST_S3_BUCKET"),
        endpoint: Some(var("LAKESTREAM_TEST_S3_ENDPOINT")),
        region: var("LAKESTREAM_TEST_S3_REGION"),
        force_path_style: true,
        conditional_put: testkit::conditional_put(),
        max_attempts: 1,
        ..S3Config::default()
    };
    assert!(config.access_key_id.is_none() && !config.anonymous);
    let result = runtime.block_on(async {
        let store = S3Store::new(config)?;
        let path = ObjectPath::new(format!("{}/credential-chain", unique_run_prefix())).unwrap();
        let body = Bytes::from_static(b"signed by the default chain");
        store.put(&path, body.clone()).await?;
        let read = store.get(&path).await?;
        store.delete(&path).await?;
        assert_eq!(read, body);
        Ok::<_, lakestream_objstore::ObjectStoreError>(())
    });
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("class={:?} error={e}", e.class());
            FAILED
        }
    }
}
