//! What the front ends record (`lakestream-server`): HTTP requests by route template, method
//! and status class; gRPC calls by method and status code; each listener's connections.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::kinds::{Announced, FixedFamily, latency_histogram};

/// The route label of a request no route matched (a 404 from the fallback): one value for
/// every unknown path, so that probing paths cannot grow the label set.
pub const UNMATCHED_ROUTE: &str = "unmatched";

/// The HTTP methods counted by name; any other method is counted as `other`.
const HTTP_METHODS: [&str; 7] = ["GET", "POST", "PUT", "DELETE", "HEAD", "PATCH", "OPTIONS"];

/// The status classes, indexed by the status's first digit minus one.
const STATUS_CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// The bounded label value of an HTTP method.
fn method_label(method: &http::Method) -> &'static str {
    HTTP_METHODS.iter().find(|m| **m == method.as_str()).copied().unwrap_or("other")
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RouteLabels {
    route: String,
    method: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RouteStatusLabels {
    route: String,
    method: &'static str,
    status: &'static str,
}

/// HTTP requests by route template (the router's pattern, never the raw path), method and
/// status class. The label set is bounded by the routes the router has.
#[derive(Debug)]
pub struct HttpRequestMetrics {
    requests: Family<RouteStatusLabels, Counter>,
    duration: Family<RouteLabels, Histogram>,
}

impl HttpRequestMetrics {
    /// New request metrics, registered in `registry`.
    pub(crate) fn registered(registry: &mut Registry) -> Self {
        let metrics = HttpRequestMetrics {
            requests: Family::default(),
            duration: Family::new_with_constructor(latency_histogram),
        };
        registry.register(
            "lakestream_http_requests",
            "HTTP requests answered, by route template, method and status class",
            Announced(metrics.requests.clone()),
        );
        registry.register(
            "lakestream_http_request_duration_seconds",
            "Time to answer an HTTP request (to the response head), by route template and method",
            Announced(metrics.duration.clone()),
        );
        metrics
    }

    /// Records a request answered with `status` after `elapsed`. `route` is the matched
    /// route's pattern, or `None` when no route matched.
    pub fn observe(
        &self,
        route: Option<&str>,
        method: &http::Method,
        status: http::StatusCode,
        elapsed: Duration,
    ) {
        let route = route.unwrap_or(UNMATCHED_ROUTE).to_owned();
        let method = method_label(method);
        let status = STATUS_CLASSES[usize::from(status.as_u16() / 100).clamp(1, 5) - 1];
        self.requests.get_or_create(&RouteStatusLabels { route: route.clone(), method, status }).inc();
        self.duration.get_or_create(&RouteLabels { route, method }).observe(elapsed.as_secs_f64());
    }
}

/// The methods of `lakestream.v1.Lakestream`; a call to any other path is counted as
/// `unknown`.
pub const GRPC_METHODS: [&str; 12] = [
    "CreateNamespace",
    "ListNamespaces",
    "CreateStream",
    "GetStream",
    "ListStreams",
    "DropStream",
    "AddPartitions",
    "Produce",
    "Fetch",
    "GetOffsets",
    "Trim",
    "ProduceCloudEvents",
];

/// The gRPC status codes' names, indexed by their numbers.
const GRPC_CODES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct MethodLabels {
    method: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct MethodCodeLabels {
    method: &'static str,
    code: &'static str,
}

/// gRPC calls by method and status code: at most 13 methods times 17 codes.
#[derive(Debug)]
pub struct GrpcRequestMetrics {
    requests: Family<MethodCodeLabels, Counter>,
    duration: Family<MethodLabels, Histogram>,
}

impl GrpcRequestMetrics {
    /// New call metrics, registered in `registry`.
    pub(crate) fn registered(registry: &mut Registry) -> Self {
        let metrics = GrpcRequestMetrics {
            requests: Family::default(),
            duration: Family::new_with_constructor(latency_histogram),
        };
        registry.register(
            "lakestream_grpc_requests",
            "gRPC calls answered, by method and status code",
            Announced(metrics.requests.clone()),
        );
        registry.register(
            "lakestream_grpc_request_duration_seconds",
            "Time to answer a gRPC call (to the response head), by method",
            Announced(metrics.duration.clone()),
        );
        metrics
    }

    /// The method label of a call to `path` (`/lakestream.v1.Lakestream/Produce`): the
    /// method's name when it is one of ours, else `unknown`.
    pub fn method_of(path: &str) -> &'static str {
        path.strip_prefix("/lakestream.v1.Lakestream/")
            .and_then(|m| GRPC_METHODS.iter().find(|k| **k == m))
            .copied()
            .unwrap_or("unknown")
    }

    /// Records a call to `method` (see [`GrpcRequestMetrics::method_of`]) answered with `code`
    /// after `elapsed`.
    pub fn observe(&self, method: &'static str, code: tonic::Code, elapsed: Duration) {
        let code = GRPC_CODES[(code as usize).min(GRPC_CODES.len() - 1)];
        self.requests.get_or_create(&MethodCodeLabels { method, code }).inc();
        self.duration.get_or_create(&MethodLabels { method }).observe(elapsed.as_secs_f64());
    }
}

/// Counters and the open-connections gauge of one listener, for `/metrics`.
#[derive(Debug, Default)]
pub struct ConnectionStats {
    /// Connections open now.
    pub open: super::Gauge,
    /// Connections refused because `max_connections` were open.
    pub refused: super::Counter,
    /// Connections closed because no request was in flight for `idle_timeout`.
    pub idle_closed: super::Counter,
    /// TLS handshakes that failed or did not finish within `tls_handshake_timeout`.
    pub tls_handshake_failed: super::Counter,
}

impl ConnectionStats {
    /// Registers the connection metrics of both listeners, labelled `listener="http"` and
    /// `listener="grpc"`.
    pub(crate) fn register_listeners(
        registry: &mut Registry,
        http: &ConnectionStats,
        grpc: &ConnectionStats,
    ) {
        let listeners = [("http", http), ("grpc", grpc)];
        let family = |read: fn(&ConnectionStats) -> &super::Counter| {
            FixedFamily::new(
                listeners.map(|(listener, stats)| ([("listener", listener)], read(stats).clone())),
            )
        };
        registry.register(
            "lakestream_connections_open",
            "Connections open",
            FixedFamily::new(
                listeners.map(|(listener, stats)| ([("listener", listener)], stats.open.clone())),
            ),
        );
        registry.register(
            "lakestream_connections_refused",
            "Connections refused at listener.max_connections",
            family(|c| &c.refused),
        );
        registry.register(
            "lakestream_connections_idle_closed",
            "Connections closed after listener.idle_timeout without a request in flight",
            family(|c| &c.idle_closed),
        );
        registry.register(
            "lakestream_tls_handshake_failures",
            "TLS handshakes that failed or timed out",
            family(|c| &c.tls_handshake_failed),
        );
    }
}
