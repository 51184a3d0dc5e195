//! The one way a fabrx node makes its Prometheus metrics (docs/metrics.md).
//!
//! A [`Registry`] carries the role's prefix (`fabrx_<role>_`) and, on a node, the node's
//! constant labels (`party`, `shard`). Each metric is made and registered by one call
//! ([`Registry::counter`], [`Registry::histogram_vec`], …) with its bare name, so a name
//! is written once and a metric cannot be made without being exported. Histograms take
//! one of the shared [`Buckets`]. A labelled metric is given the label values it is known
//! to take, and their series exist at zero from the start: a dashboard shows 0 before
//! the first event, not "no data". A node's registry ([`Registry::node`]) also holds the
//! process metrics (`process_cpu_seconds_total`, `process_resident_memory_bytes`,
//! `process_open_fds`, …) and `fabrx_build_info`; a node with a data directory adds
//! the free space of its file system ([`Registry::data_dir`]). [`http`] serves a
//! registry.

pub mod disk;
pub mod http;

use prometheus::core::Collector;
use prometheus::{
    Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
};
use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Why a metric could not be made or served.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A metric's name, help or labels were refused, or its name is taken.
    #[error("metric {name}: {source}")]
    Metric {
        /// The metric's full name.
        name: String,
        /// What Prometheus said.
        #[source]
        source: prometheus::Error,
    },
    /// The node's constant labels were refused.
    #[error("constant labels of the {role} registry: {source}")]
    Labels {
        /// The role.
        role: String,
        /// What Prometheus said.
        #[source]
        source: prometheus::Error,
    },
    /// The metrics endpoint could not bind its address.
    #[error("serving metrics on {addr}: {source}")]
    Listen {
        /// The address.
        addr: String,
        /// The bind error.
        #[source]
        source: std::io::Error,
    },
}

/// The histogram bucket sets every role shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Buckets {
    /// One call or request answered by this node: 100 µs doubling to about 13 s.
    Call,
    /// A stage that waits on other nodes (ordering, a block's commit): 1 ms doubling to
    /// about 33 s.
    Stage,
    /// A count (headers per decision, txs per batch): 1 doubling to 512.
    Count,
}

impl Buckets {
    /// The upper bounds.
    pub fn bounds(self) -> Vec<f64> {
        let (start, n) = match self {
            Buckets::Call => (0.0001, 18),
            Buckets::Stage => (0.001, 16),
            Buckets::Count => (1.0, 10),
        };
        (0..n).map(|i| start * f64::from(1u32 << i)).collect()
    }
}

/// A registry of one role's metrics: every name gets the prefix `fabrx_<role>_`.
///
/// Making a metric a second time under the same name and kind returns the first one (a
/// node restarted in the same process, or a test that reads the metrics a node made,
/// gets the same series); the same name with another kind is an error.
#[derive(Clone)]
pub struct Registry {
    inner: prometheus::Registry,
    prefix: String,
    made: Arc<Mutex<HashMap<String, Box<dyn Any + Send + Sync>>>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// The version `fabrx_build_info` reports.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

impl Registry {
    /// A node's registry: every series carries `labels`, and it also holds the process
    /// metrics and `fabrx_build_info{role, version}` (always 1).
    pub fn node(role: &str, labels: &[(&str, String)]) -> Result<Registry, Error> {
        let constant = labels.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
        let inner =
            prometheus::Registry::new_custom(None, Some(constant)).map_err(|source| Error::Labels {
                role: role.to_owned(),
                source,
            })?;
        let registry = Registry {
            inner,
            prefix: format!("fabrx_{role}"),
            made: Arc::default(),
        };
        registry.collector(
            "process_*",
            Box::new(prometheus::process_collector::ProcessCollector::for_self()),
        )?;
        let info = IntGauge::with_opts(
            Opts::new(
                "fabrx_build_info",
                "The fabrx build: always 1, with its version and the node's role",
            )
            .const_label("role", role)
            .const_label("version", VERSION),
        )
        .map_err(|source| Error::Metric {
            name: "fabrx_build_info".into(),
            source,
        })?;
        info.set(1);
        registry.collector("fabrx_build_info", Box::new(info))?;
        Ok(registry)
    }

    /// Adds `fabrx_data_dir_available_bytes` and `fabrx_data_dir_size_bytes`: the file
    /// system under `path` (the node's data directory), measured at each scrape.
    pub fn data_dir(&self, path: &std::path::Path) -> Result<(), Error> {
        let collector = disk::DataDir::new(path.to_path_buf()).map_err(|source| Error::Metric {
            name: disk::AVAILABLE.into(),
            source,
        })?;
        self.collector(disk::AVAILABLE, Box::new(collector))
    }

    /// A registry nothing exports (tests, and a role run inside another process): the
    /// same names, no constant labels, no process metrics.
    pub fn detached(role: &str) -> Registry {
        Registry {
            inner: prometheus::Registry::new(),
            prefix: format!("fabrx_{role}"),
            made: Arc::default(),
        }
    }

    /// The Prometheus registry underneath (to gather it).
    pub fn prometheus(&self) -> &prometheus::Registry {
        &self.inner
    }

    /// The registry in Prometheus text format, as a scrape reads it.
    pub fn text(&self) -> String {
        use prometheus::Encoder;
        let mut out = Vec::new();
        // Encoding gathered families into a Vec cannot fail on I/O; a family that breaks
        // the format is logged and left out.
        if let Err(e) = prometheus::TextEncoder::new().encode(&self.inner.gather(), &mut out) {
            tracing::warn!(error = %e, "encoding metrics");
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    /// The full name of `name`.
    pub fn name(&self, name: &str) -> String {
        format!("{}_{name}", self.prefix)
    }

    /// Registers a collector made elsewhere (`what` names it in an error).
    pub fn collector(&self, what: &str, c: Box<dyn Collector>) -> Result<(), Error> {
        self.inner.register(c).map_err(|source| Error::Metric {
            name: what.to_owned(),
            source,
        })
    }

    /// The metric `name` made before, or `make()` registered now.
    fn add<M: Collector + Clone + Send + Sync + 'static>(
        &self,
        name: String,
        make: impl FnOnce() -> prometheus::Result<M>,
    ) -> Result<M, Error> {
        let mut made = self
            .made
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(before) = made.get(&name) {
            return before.downcast_ref::<M>().cloned().ok_or_else(|| Error::Metric {
                name: name.clone(),
                source: prometheus::Error::Msg("made before as another kind of metric".into()),
            });
        }
        let m = make().map_err(|source| Error::Metric {
            name: name.clone(),
            source,
        })?;
        self.collector(&name, Box::new(m.clone()))?;
        made.insert(name, Box::new(m.clone()));
        Ok(m)
    }

    /// A counter.
    pub fn counter(&self, name: &str, help: &str) -> Result<IntCounter, Error> {
        let name = self.name(name);
        self.add(name.clone(), || IntCounter::new(name, help))
    }

    /// A counter with `labels`; each row of `known` (one value per label) exists at 0
    /// from the start.
    pub fn counter_vec(
        &self,
        name: &str,
        help: &str,
        labels: &[&str],
        known: &[&[&str]],
    ) -> Result<IntCounterVec, Error> {
        let name = self.name(name);
        let m = self.add(name.clone(), || {
            IntCounterVec::new(Opts::new(name.clone(), help), labels)
        })?;
        present(&name, &m, known)?;
        Ok(m)
    }

    /// A counter with one label, whose every value in `values` exists at 0 from the
    /// start.
    pub fn counter_by(
        &self,
        name: &str,
        help: &str,
        label: &str,
        values: &[&str],
    ) -> Result<IntCounterVec, Error> {
        let rows: Vec<[&str; 1]> = values.iter().map(|v| [*v]).collect();
        let known: Vec<&[&str]> = rows.iter().map(|r| &r[..]).collect();
        self.counter_vec(name, help, &[label], &known)
    }

    /// A gauge.
    pub fn gauge(&self, name: &str, help: &str) -> Result<IntGauge, Error> {
        let name = self.name(name);
        self.add(name.clone(), || IntGauge::new(name, help))
    }

    /// A gauge of a fractional value.
    pub fn float_gauge(&self, name: &str, help: &str) -> Result<Gauge, Error> {
        let name = self.name(name);
        self.add(name.clone(), || Gauge::new(name, help))
    }

    /// A gauge with `labels`; each row of `known` exists at 0 from the start.
    pub fn gauge_vec(
        &self,
        name: &str,
        help: &str,
        labels: &[&str],
        known: &[&[&str]],
    ) -> Result<IntGaugeVec, Error> {
        let name = self.name(name);
        let m = self.add(name.clone(), || {
            IntGaugeVec::new(Opts::new(name.clone(), help), labels)
        })?;
        present(&name, &m, known)?;
        Ok(m)
    }

    /// A histogram over `buckets`.
    pub fn histogram(&self, name: &str, help: &str, buckets: Buckets) -> Result<Histogram, Error> {
        let name = self.name(name);
        self.add(name.clone(), || {
            Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets.bounds()))
        })
    }

    /// A histogram over `buckets` with `labels`; each row of `known` exists (empty)
    /// from the start.
    pub fn histogram_vec(
        &self,
        name: &str,
        help: &str,
        labels: &[&str],
        buckets: Buckets,
        known: &[&[&str]],
    ) -> Result<HistogramVec, Error> {
        let name = self.name(name);
        let m = self.add(name.clone(), || {
            HistogramVec::new(
                HistogramOpts::new(name.clone(), help).buckets(buckets.bounds()),
                labels,
            )
        })?;
        present(&name, &m, known)?;
        Ok(m)
    }
}

/// Makes the series of each row of `known` in `m` (so they exist at 0 from the start).
fn present<P: prometheus::core::MetricVecBuilder>(
    name: &str,
    m: &prometheus::core::MetricVec<P>,
    known: &[&[&str]],
) -> Result<(), Error> {
    for values in known {
        m.get_metric_with_label_values(values)
            .map_err(|source| Error::Metric {
                name: name.to_owned(),
                source,
            })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn names_get_the_prefix_and_known_series_exist_at_zero() {
        let r = Registry::detached("router");
        let refused = r
            .counter_vec(
                "refused_total",
                "refused",
                &["reason"],
                &[&["shard_full"], &["link_down"]],
            )
            .unwrap();
        let text = r.text();
        assert!(
            text.contains("fabrx_router_refused_total{reason=\"shard_full\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("fabrx_router_refused_total{reason=\"link_down\"} 0"),
            "{text}"
        );
        refused.with_label_values(&["link_down"]).inc();
        assert!(
            r.text()
                .contains("fabrx_router_refused_total{reason=\"link_down\"} 1")
        );
    }

    #[test]
    fn a_name_made_again_is_the_same_metric_and_another_kind_is_an_error() {
        let r = Registry::detached("query");
        let first = r.counter("x_total", "x").unwrap();
        let again = r.counter("x_total", "x").unwrap();
        first.inc();
        assert_eq!(again.get(), 1);
        assert_eq!(
            r.text().matches("fabrx_query_x_total 1").count(),
            1,
            "{}",
            r.text()
        );
        let e = r.gauge("x_total", "x").unwrap_err();
        assert!(e.to_string().contains("fabrx_query_x_total"), "{e}");
    }

    #[test]
    fn a_known_row_of_the_wrong_width_is_an_error() {
        let r = Registry::detached("query");
        assert!(
            r.counter_vec("y_total", "y", &["a", "b"], &[&["only_one"]])
                .is_err()
        );
    }

    #[test]
    fn a_node_registry_has_build_info_process_metrics_and_its_labels() {
        let r = Registry::node("batcher", &[("party", "2".into()), ("shard", "1".into())]).unwrap();
        r.gauge("term", "term").unwrap();
        let text = r.text();
        // The series of `name`, whatever order its labels come in.
        let series = |name: &str| -> Vec<&str> {
            text.lines()
                .filter(|l| l.starts_with(&format!("{name}{{")))
                .collect()
        };
        for name in [
            "fabrx_batcher_term",
            "fabrx_build_info",
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
        ] {
            let lines = series(name);
            assert_eq!(lines.len(), 1, "{name}: {text}");
            assert!(
                lines[0].contains("party=\"2\"") && lines[0].contains("shard=\"1\""),
                "{name}: {text}"
            );
        }
        let info = series("fabrx_build_info")[0];
        assert!(
            info.contains("role=\"batcher\"") && info.contains(&format!("version=\"{VERSION}\"")),
            "{info}"
        );
        assert!(info.ends_with(" 1"), "{info}");
    }

    #[test]
    fn a_data_dir_reports_its_file_system_and_nothing_once_it_is_gone() {
        let dir = std::env::temp_dir().join(format!("telemetry-disk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let r = Registry::node("assembler", &[("party", "1".into())]).unwrap();
        r.data_dir(&dir).unwrap();
        let value = |text: &str, name: &str| -> Option<u64> {
            let line = text.lines().find(|l| l.starts_with(&format!("{name}{{")))?;
            assert!(line.contains("party=\"1\""), "{line}");
            line.rsplit(' ').next()?.parse().ok()
        };
        let text = r.text();
        let (available, size) = (
            value(&text, disk::AVAILABLE).unwrap(),
            value(&text, disk::SIZE).unwrap(),
        );
        assert!(size > 0 && available <= size, "{available} of {size}");
        std::fs::remove_dir(&dir).unwrap();
        let text = r.text();
        assert_eq!(value(&text, disk::AVAILABLE), None, "{text}");
        assert_eq!(value(&text, disk::SIZE), None, "{text}");
    }

    #[test]
    fn bucket_sets_grow_by_doubling() {
        for b in [Buckets::Call, Buckets::Stage, Buckets::Count] {
            let bounds = b.bounds();
            assert!(
                bounds.windows(2).all(|w| (w[1] - 2.0 * w[0]).abs() < 1e-12),
                "{b:?}"
            );
        }
        assert_eq!(Buckets::Count.bounds().last(), Some(&512.0));
    }
}
