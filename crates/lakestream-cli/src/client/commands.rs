//! The administrative commands: namespaces, streams, offsets and trims.

use serde_json::{Value, json};

use super::consume::offsets;
use super::{Api, ClientResult, partition_path, segment, stream_path};

/// `namespace create`.
pub async fn create_namespace(api: &Api, name: &str) -> ClientResult<()> {
    api.json("POST", "/v1/namespaces", json!({ "name": name })).await?;
    println!("created namespace {name}");
    Ok(())
}

/// `namespace list`, every page.
pub async fn list_namespaces(api: &Api) -> ClientResult<()> {
    for_each_page(api, "/v1/namespaces", "namespaces", |n| {
        println!("{}", n["name"].as_str().unwrap_or("?"));
    })
    .await
}

/// `namespace delete`.
pub async fn delete_namespace(api: &Api, name: &str) -> ClientResult<()> {
    api.json("DELETE", &format!("/v1/namespaces/{}", segment(name)), Value::Null).await?;
    println!("deleted namespace {name}");
    Ok(())
}

/// `stream update`: sets (string) or removes (null) properties.
pub async fn update_stream(
    api: &Api,
    ns: &str,
    name: &str,
    changes: serde_json::Map<String, Value>,
) -> ClientResult<()> {
    let v = api.json("PATCH", &stream_path(ns, name), json!({ "properties": changes })).await?;
    println!("updated {ns}/{name}: properties {}", v["properties"]);
    Ok(())
}

/// `stream create`.
pub async fn create_stream(api: &Api, ns: &str, name: &str, partitions: u32) -> ClientResult<()> {
    let v = api
        .json(
            "POST",
            &format!("/v1/namespaces/{}/streams", segment(ns)),
            json!({"name": name, "partitions": partitions}),
        )
        .await?;
    println!("created {ns}/{name}: {} partition(s), log ids {}", v["partitions"], v["log_ids"]);
    Ok(())
}

/// `stream list`, every page.
pub async fn list_streams(api: &Api, ns: &str) -> ClientResult<()> {
    for_each_page(api, &format!("/v1/namespaces/{}/streams", segment(ns)), "streams", |s| {
        println!("{}\t{} partition(s)", s["name"].as_str().unwrap_or("?"), s["partitions"]);
    })
    .await
}

async fn for_each_page(api: &Api, path: &str, key: &str, mut each: impl FnMut(&Value)) -> ClientResult<()> {
    let mut after: Option<String> = None;
    loop {
        let page = match &after {
            Some(a) => format!("{path}?after={}", segment(a)),
            None => path.to_string(),
        };
        let v = api.json("GET", &page, Value::Null).await?;
        v[key].as_array().into_iter().flatten().for_each(&mut each);
        match v["next_page"].as_str() {
            Some(next) => after = Some(next.to_string()),
            None => return Ok(()),
        }
    }
}

/// `stream drop`.
pub async fn drop_stream(api: &Api, ns: &str, name: &str) -> ClientResult<()> {
    api.json("DELETE", &stream_path(ns, name), Value::Null).await?;
    println!("dropped {ns}/{name}");
    Ok(())
}

/// `describe`: the stream's settings and each partition's log and offsets.
pub async fn describe(api: &Api, ns: &str, name: &str) -> ClientResult<()> {
    let v = api.json("GET", &stream_path(ns, name), Value::Null).await?;
    println!("stream      {ns}/{name}");
    println!("partitions  {}", v["partitions"]);
    if let Some(ms) = v["created_ms"].as_i64().and_then(|ms| u64::try_from(ms).ok()) {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
        println!("created     {}", humantime::format_rfc3339_millis(t));
    }
    for (k, value) in v["properties"].as_object().into_iter().flatten() {
        println!("property    {k} = {}", value.as_str().unwrap_or(""));
    }
    println!("{:<10} {:<20} {:>14} {:>14} {:>14}", "PARTITION", "LOG ID", "FIRST", "NEXT", "ENTRIES+");
    let logs = v["log_ids"].as_array().cloned().unwrap_or_default();
    for (p, log) in logs.iter().enumerate() {
        let (first, next) = offsets(api, ns, name, p as u32).await?;
        println!("{p:<10} {:<20} {first:>14} {next:>14} {:>14}", log.to_string(), next - first.min(next));
    }
    Ok(())
}

/// `offsets`: first and next offsets and the trim marker of one partition or all.
pub async fn print_offsets(api: &Api, ns: &str, name: &str, partition: Option<u32>) -> ClientResult<()> {
    let partitions: Vec<u32> = match partition {
        Some(p) => vec![p],
        None => {
            let v = api.json("GET", &stream_path(ns, name), Value::Null).await?;
            (0..v["partitions"].as_u64().unwrap_or(0) as u32).collect()
        }
    };
    println!("{:<10} {:>14} {:>14} {:>14}", "PARTITION", "FIRST", "NEXT", "TRIM MARKER");
    for p in partitions {
        let v = api.json("GET", &partition_path(ns, name, p, "offsets"), Value::Null).await?;
        let marker = v["trim_marker"].as_u64().map(|m| m.to_string()).unwrap_or_else(|| "-".into());
        println!("{p:<10} {:>14} {:>14} {marker:>14}", v["first_offset"], v["next_offset"]);
    }
    Ok(())
}

/// `trim`: soft-trims a partition through an offset, inclusive.
pub async fn trim(api: &Api, ns: &str, name: &str, partition: u32, through: u64) -> ClientResult<()> {
    let v =
        api.json("POST", &partition_path(ns, name, partition, "trim"), json!({ "through": through })).await?;
    let advanced = v["advanced"].as_bool().unwrap_or(false);
    println!(
        "{ns}/{name}/{partition}: trim marker {}{}",
        v["trim_marker"],
        if advanced { "" } else { " (unchanged: already trimmed that far)" }
    );
    Ok(())
}

/// `groups list`: the namespace's consumer groups.
pub async fn list_groups(api: &Api, ns: &str) -> ClientResult<()> {
    let mut after: Option<String> = None;
    loop {
        let path = match &after {
            Some(a) => format!("/v1/namespaces/{}/groups?after={}", segment(ns), segment(a)),
            None => format!("/v1/namespaces/{}/groups", segment(ns)),
        };
        let v = api.json("GET", &path, Value::Null).await?;
        for g in v["groups"].as_array().into_iter().flatten() {
            println!("{}", g.as_str().map(str::to_owned).unwrap_or_else(|| g.to_string()));
        }
        match v["next_page"].as_str() {
            Some(next) => after = Some(next.to_string()),
            None => return Ok(()),
        }
    }
}

/// `groups offsets GROUP STREAM`: committed offset, next offset and lag per partition.
pub async fn group_offsets(api: &Api, ns: &str, group: &str, stream: &str) -> ClientResult<()> {
    let path =
        format!("/v1/namespaces/{}/groups/{}/streams/{}", segment(ns), segment(group), segment(stream));
    let v = api.json("GET", &path, Value::Null).await?;
    println!("{:<10} {:>14} {:>14} {:>14}", "PARTITION", "COMMITTED", "NEXT", "LAG");
    for p in v["partitions"].as_array().into_iter().flatten() {
        let committed =
            p["committed"]["offset"].as_u64().map(|o| o.to_string()).unwrap_or_else(|| "-".into());
        println!("{:<10} {committed:>14} {:>14} {:>14}", p["partition"], p["next_offset"], p["lag"]);
    }
    Ok(())
}
