//! The process's Prometheus registry and KubeVirt's work-queue metrics.
//!
//! [`Metrics`] owns one `prometheus_client` [`Registry`] and encodes it in the Prometheus text
//! format 0.0.4 (what KubeVirt's `/metrics` serves). Work-queue metrics use KubeVirt's names and
//! help texts (pkg/monitoring/metrics/common/workqueue/metrics.go:33-108), all labelled with
//! `name` = the queue name (`virt-controller-vm`, `virt-controller-vmi`):
//!
//! | metric | type |
//! |---|---|
//! | `kubevirt_workqueue_depth` | gauge |
//! | `kubevirt_workqueue_adds_total` | counter |
//! | `kubevirt_workqueue_queue_duration_seconds` | histogram |
//! | `kubevirt_workqueue_work_duration_seconds` | histogram |
//! | `kubevirt_workqueue_retries_total` | counter |
//! | `kubevirt_workqueue_longest_running_processor_seconds` | gauge (f64) |
//! | `kubevirt_workqueue_unfinished_work_seconds` | gauge (f64) |
//!
//! Histogram buckets: exponential from 1e-8 s, factor 10, 10 buckets (`ExponentialBuckets(10e-9,
//! 10, 10)`). The two "unfinished" gauges are refreshed on every scrape ([`Metrics::encode`]),
//! client-go refreshes them every 500 ms instead (queue.go `updateUnfinishedWorkLoop`).
//!
//! Adding a metric: call [`Metrics::register_gauge`] (or [`Metrics::register`] for any
//! `prometheus_client` metric) once at start-up and keep the returned handle.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, Weak};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Metric, Registry};

/// Lock a mutex, recovering the data if a thread panicked while holding it (every update here
/// leaves the data consistent, so a poisoned lock is still usable).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `Content-Type` of [`Metrics::encode`]'s output (Prometheus text format 0.0.4).
pub(crate) const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Errors from encoding the registry.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The text encoder failed (only happens when a metric's own encoder fails).
    #[error("encoding metrics to Prometheus text: {0}")]
    Encode(#[from] std::fmt::Error),
}

/// The metrics registry of the process. Cheap to share behind an `Arc`; all methods take
/// `&self`.
#[derive(Debug)]
pub struct Metrics {
    registry: Mutex<Registry>,
    workqueue: WorkqueueMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry with KubeVirt's work-queue metric families already registered (they are
    /// encoded only once a queue uses them, like client_golang omits empty vectors).
    pub(crate) fn new() -> Self {
        let workqueue = WorkqueueMetrics::new();
        let mut registry = Registry::default();
        registry.register_collector(Box::new(workqueue.clone()));
        Self {
            registry: Mutex::new(registry),
            workqueue,
        }
    }

    /// The work-queue metric families; pass them to
    /// [`WorkQueueBuilder::metrics`](crate::runtime::queue::WorkQueueBuilder::metrics).
    pub(crate) fn workqueue(&self) -> &WorkqueueMetrics {
        &self.workqueue
    }

    /// Register any `prometheus_client` metric. `name` is exposed as given except that counters
    /// get `_total` appended by the encoder (so pass counter names without it); `help` gets a
    /// full stop appended by `prometheus_client`.
    pub(crate) fn register(&self, name: &str, help: &str, metric: impl Metric) {
        lock(&self.registry).register(name, help, metric);
    }

    /// Register an unlabelled integer gauge (e.g. `kubevirt_virt_controller_leading_status`)
    /// and return its handle.
    pub(crate) fn register_gauge(&self, name: &str, help: &str) -> Gauge {
        let gauge = Gauge::default();
        self.register(name, help, gauge.clone());
        gauge
    }

    /// Refresh the scrape-time gauges and encode every metric in the Prometheus text format
    /// 0.0.4 ([`CONTENT_TYPE`]).
    pub fn encode(&self) -> Result<String, MetricsError> {
        self.workqueue.update_unfinished_work();
        let mut out = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut out, &lock(&self.registry))?;
        Ok(out)
    }
}

/// Label set of every work-queue metric: `name` = the queue name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct QueueLabels {
    /// The queue name, e.g. `virt-controller-vm`.
    pub name: String,
}

/// A settable floating-point gauge (seconds).
pub(crate) type FloatGauge = Gauge<f64, AtomicU64>;

/// Histogram constructor used by both duration families: buckets 1e-8 s × 10^i, i = 0..10
/// (KubeVirt `prometheus.ExponentialBuckets(10e-9, 10, 10)`).
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1e-8, 10.0, 10))
}

type HistogramFamily = Family<QueueLabels, Histogram, fn() -> Histogram>;

/// Something whose unfinished-work gauges must be refreshed before a scrape (a work queue).
pub(crate) trait UnfinishedWork: Send + Sync {
    /// Recompute `unfinished_work_seconds` and `longest_running_processor_seconds`.
    fn update_unfinished_work(&self);
}

/// KubeVirt's seven work-queue metric families (label `name`), shared by all queues of the
/// process. Clones share the same families.
#[derive(Clone)]
pub(crate) struct WorkqueueMetrics {
    depth: Family<QueueLabels, Gauge>,
    adds: Family<QueueLabels, Counter>,
    latency: HistogramFamily,
    work_duration: HistogramFamily,
    retries: Family<QueueLabels, Counter>,
    longest_running: Family<QueueLabels, FloatGauge>,
    unfinished_work: Family<QueueLabels, FloatGauge>,
    queues: Arc<Mutex<Vec<Weak<dyn UnfinishedWork>>>>,
}

impl std::fmt::Debug for WorkqueueMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkqueueMetrics")
            .field("tracked_queues", &lock(&self.queues).len())
            .finish_non_exhaustive()
    }
}

impl Default for WorkqueueMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl WorkqueueMetrics {
    /// Empty families, not registered anywhere (use [`Metrics::new`] for the registered set).
    pub(crate) fn new() -> Self {
        Self {
            depth: Family::default(),
            adds: Family::default(),
            latency: Family::new_with_constructor(duration_histogram as fn() -> Histogram),
            work_duration: Family::new_with_constructor(duration_histogram as fn() -> Histogram),
            retries: Family::default(),
            longest_running: Family::default(),
            unfinished_work: Family::default(),
            queues: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// The metric handles of the queue called `name` (client-go `MetricsProvider.New*Metric`).
    /// Creates the labelled series (at zero) if they do not exist yet.
    pub(crate) fn for_queue(&self, name: &str) -> QueueMetrics {
        let l = QueueLabels {
            name: name.to_string(),
        };
        QueueMetrics {
            depth: self.depth.get_or_create_owned(&l),
            adds: self.adds.get_or_create_owned(&l),
            latency: self.latency.get_or_create_owned(&l),
            work_duration: self.work_duration.get_or_create_owned(&l),
            retries: self.retries.get_or_create_owned(&l),
            longest_running: self.longest_running.get_or_create_owned(&l),
            unfinished_work: self.unfinished_work.get_or_create_owned(&l),
        }
    }

    /// Remember `queue` so that its unfinished-work gauges are refreshed on scrape. Only a weak
    /// reference is kept: dropped queues are skipped and pruned.
    pub(crate) fn track(&self, queue: Weak<dyn UnfinishedWork>) {
        lock(&self.queues).push(queue);
    }

    /// Refresh the unfinished-work gauges of every live tracked queue.
    pub(crate) fn update_unfinished_work(&self) {
        let live: Vec<Arc<dyn UnfinishedWork>> = {
            let mut queues = lock(&self.queues);
            queues.retain(|q| q.strong_count() > 0);
            queues.iter().filter_map(Weak::upgrade).collect()
        };
        // Called without holding our lock: each queue takes its own.
        for q in live {
            q.update_unfinished_work();
        }
    }
}

/// Encode one family with KubeVirt's exact help text (no full stop appended), skipping empty
/// families like client_golang does.
fn encode_family(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    family: &impl EncodeMetric,
) -> Result<(), std::fmt::Error> {
    if family.is_empty() {
        return Ok(());
    }
    let metric_encoder = encoder.encode_descriptor(name, help, None, family.metric_type())?;
    family.encode(metric_encoder)
}

impl Collector for WorkqueueMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let e = &mut encoder;
        // Counter names are given without `_total`: the encoder appends it.
        encode_family(
            e,
            "kubevirt_workqueue_depth",
            "Current depth of workqueue",
            &self.depth,
        )?;
        encode_family(
            e,
            "kubevirt_workqueue_adds",
            "Total number of adds handled by workqueue",
            &self.adds,
        )?;
        encode_family(
            e,
            "kubevirt_workqueue_queue_duration_seconds",
            "How long an item stays in workqueue before being requested.",
            &self.latency,
        )?;
        encode_family(
            e,
            "kubevirt_workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes.",
            &self.work_duration,
        )?;
        encode_family(
            e,
            "kubevirt_workqueue_retries",
            "Total number of retries handled by workqueue",
            &self.retries,
        )?;
        encode_family(
            e,
            "kubevirt_workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running.",
            &self.longest_running,
        )?;
        encode_family(
            e,
            "kubevirt_workqueue_unfinished_work_seconds",
            "How many seconds of work have been in progress and haven't been observed by \
             work_duration. Large values indicate stuck threads. One can deduce the number of \
             stuck threads by observing the rate at which this increases.",
            &self.unfinished_work,
        )
    }
}

/// One queue's metric handles (client-go `defaultQueueMetrics` + `defaultRetryMetrics`).
#[derive(Clone, Debug)]
pub(crate) struct QueueMetrics {
    /// Items waiting to be processed, counting keys marked dirty while in flight (client-go
    /// increments on every accepted add and decrements on get).
    pub depth: Gauge,
    /// Accepted adds (adds of an already queued key are not counted).
    pub adds: Counter,
    /// Seconds from add to get.
    pub latency: Histogram,
    /// Seconds from get to done.
    pub work_duration: Histogram,
    /// Calls to `add_after` / `add_rate_limited` while not shutting down.
    pub retries: Counter,
    /// Age in seconds of the oldest in-flight item.
    pub longest_running: FloatGauge,
    /// Sum of the ages in seconds of all in-flight items.
    pub unfinished_work: FloatGauge,
}

/// Asserts that the exposition `text` has each of `expected` as a whole line.
#[cfg(test)]
pub(crate) fn assert_has_lines(text: &str, expected: &[&str]) {
    let lines: Vec<&str> = text.lines().collect();
    for line in expected {
        assert!(lines.contains(line), "missing line {line:?} in\n{text}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_registry_has_no_workqueue_lines() {
        let m = Metrics::new();
        let text = m.encode().unwrap();
        assert!(!text.contains("kubevirt_workqueue"), "{text}");
    }

    #[test]
    fn names_labels_types_and_buckets() {
        let m = Metrics::new();
        let q = m.workqueue().for_queue("virt-controller-vm");
        q.adds.inc();
        q.retries.inc_by(2);
        q.depth.set(3);
        q.latency.observe(0.5);
        q.unfinished_work.set(1.5);
        let text = m.encode().unwrap();
        assert_has_lines(
            &text,
            &[
                "# TYPE kubevirt_workqueue_depth gauge",
                "# HELP kubevirt_workqueue_depth Current depth of workqueue",
                "kubevirt_workqueue_depth{name=\"virt-controller-vm\"} 3",
                "# TYPE kubevirt_workqueue_adds_total counter",
                "kubevirt_workqueue_adds_total{name=\"virt-controller-vm\"} 1",
                "# TYPE kubevirt_workqueue_retries_total counter",
                "kubevirt_workqueue_retries_total{name=\"virt-controller-vm\"} 2",
                "# TYPE kubevirt_workqueue_queue_duration_seconds histogram",
                "# HELP kubevirt_workqueue_queue_duration_seconds How long an item stays in workqueue before being requested.",
                "kubevirt_workqueue_queue_duration_seconds_bucket{name=\"virt-controller-vm\",le=\"1e-08\"} 0",
                "kubevirt_workqueue_queue_duration_seconds_bucket{name=\"virt-controller-vm\",le=\"1\"} 1",
                "kubevirt_workqueue_queue_duration_seconds_bucket{name=\"virt-controller-vm\",le=\"10\"} 1",
                "kubevirt_workqueue_queue_duration_seconds_bucket{name=\"virt-controller-vm\",le=\"+Inf\"} 1",
                "kubevirt_workqueue_queue_duration_seconds_sum{name=\"virt-controller-vm\"} 0.5",
                "kubevirt_workqueue_queue_duration_seconds_count{name=\"virt-controller-vm\"} 1",
                "# TYPE kubevirt_workqueue_work_duration_seconds histogram",
                "kubevirt_workqueue_work_duration_seconds_count{name=\"virt-controller-vm\"} 0",
                "# TYPE kubevirt_workqueue_longest_running_processor_seconds gauge",
                "kubevirt_workqueue_longest_running_processor_seconds{name=\"virt-controller-vm\"} 0.0",
                "# TYPE kubevirt_workqueue_unfinished_work_seconds gauge",
                "kubevirt_workqueue_unfinished_work_seconds{name=\"virt-controller-vm\"} 1.5",
            ],
        );
        // Exactly 10 finite buckets + Inf.
        let buckets = text
            .lines()
            .filter(|l| l.starts_with("kubevirt_workqueue_queue_duration_seconds_bucket"))
            .count();
        assert_eq!(buckets, 11, "{text}");
        // No doubled suffixes.
        assert!(!text.contains("_total_total"), "{text}");
    }

    #[test]
    fn two_queues_two_series_and_extra_gauge() {
        let m = Metrics::new();
        m.workqueue().for_queue("virt-controller-vm").adds.inc();
        m.workqueue()
            .for_queue("virt-controller-vmi")
            .adds
            .inc_by(5);
        let leading = m.register_gauge(
            "kubevirt_virt_controller_leading_status",
            "Indication for an operating virt-controller",
        );
        leading.set(1);
        let text = m.encode().unwrap();
        assert!(text.contains("kubevirt_workqueue_adds_total{name=\"virt-controller-vm\"} 1\n"));
        assert!(text.contains("kubevirt_workqueue_adds_total{name=\"virt-controller-vmi\"} 5\n"));
        assert!(
            text.contains("kubevirt_virt_controller_leading_status 1\n"),
            "{text}"
        );
    }
}
