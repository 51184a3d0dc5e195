//! The load generator's own metrics (`--metrics ADDR`, docs/loadgen.md "Changing the
//! rate while it runs"): what it sent, what the routers acknowledged, what was
//! confirmed, what is in flight and the offered rate, and the `/rate` route that reads
//! and changes the rate of a fixed-rate run.

use super::Result;
use loadgen::network::{NetProgress, RateControl};
use std::sync::{Arc, Mutex};

/// The load's metrics, updated from the driver's progress once a second.
pub(crate) struct LoadMetrics {
    sent: prometheus::IntCounter,
    submitted: prometheus::IntCounter,
    confirmed: prometheus::IntCounter,
    in_flight: prometheus::IntGauge,
    rate: prometheus::Gauge,
    control: Option<Arc<RateControl>>,
    /// The counts of the last update: the counters grow by the difference.
    last: Mutex<(u64, u64, u64)>,
}

impl LoadMetrics {
    /// The metrics of load instance `instance`, served on `addr` (with the `/rate`
    /// control) when one is given.
    pub(crate) async fn start(
        addr: Option<&str>,
        instance: u32,
        control: Option<Arc<RateControl>>,
    ) -> Result<Arc<LoadMetrics>> {
        let registry = telemetry::Registry::node("loadgen", &[("instance", instance.to_string())])?;
        let r = &registry;
        let m = Arc::new(LoadMetrics {
            sent: r.counter("sent_total", "Txs sent to the routers")?,
            submitted: r.counter("submitted_total", "Txs a quorum of routers acknowledged")?,
            confirmed: r.counter("confirmed_total", "Txs with a final status")?,
            in_flight: r.gauge("in_flight", "Txs sent and not confirmed")?,
            rate: r.float_gauge("rate", "Offered txs per second (0: unpaced)")?,
            control: control.clone(),
            last: Mutex::new((0, 0, 0)),
        });
        m.rate.set(control.as_ref().map_or(0.0, |c| c.get()));
        if let Some(addr) = addr {
            let routes: telemetry::http::Routes = {
                let m = m.clone();
                Arc::new(move |req| rate_route(req, m.control.as_deref(), &m.rate))
            };
            telemetry::http::serve_with(addr, registry, Some(routes)).await?;
        }
        Ok(m)
    }

    /// Brings the metrics to the driver's progress `p`.
    pub(crate) fn update(&self, p: &NetProgress) {
        let Ok(mut last) = self.last.lock() else {
            return;
        };
        let (s, q, c) = *last;
        self.sent.inc_by(p.sent.saturating_sub(s));
        self.submitted.inc_by(p.submitted.saturating_sub(q));
        self.confirmed.inc_by(p.confirmed.saturating_sub(c));
        *last = (p.sent.max(s), p.submitted.max(q), p.confirmed.max(c));
        self.in_flight
            .set(i64::try_from(p.sent.saturating_sub(p.confirmed)).unwrap_or(i64::MAX));
        if let Some(c) = &self.control {
            self.rate.set(c.get());
        }
    }
}

/// `GET /rate` answers the offered rate; `POST /rate` (body, or `?tps=`: txs per
/// second) changes it in a fixed-rate run; other paths: the metrics.
fn rate_route(
    req: &telemetry::http::Request,
    control: Option<&RateControl>,
    gauge: &prometheus::Gauge,
) -> Option<(u16, String)> {
    if req.path != "/rate" {
        return None;
    }
    Some(match (req.method.as_str(), control) {
        ("GET", Some(c)) => (200, format!("{}\n", c.get())),
        ("GET", None) => (200, "unpaced\n".into()),
        ("POST" | "PUT", None) => (
            409,
            "this run has no fixed rate to change (start it with --rate)\n".into(),
        ),
        ("POST" | "PUT", Some(c)) => {
            let text = String::from_utf8_lossy(&req.body);
            let given = req
                .query
                .split('&')
                .find_map(|kv| kv.strip_prefix("tps="))
                .unwrap_or(text.trim());
            match given
                .trim()
                .parse::<f64>()
                .map_err(|e| e.to_string())
                .and_then(|r| c.set(r))
            {
                Ok(()) => {
                    gauge.set(c.get());
                    (200, format!("{}\n", c.get()))
                }
                Err(e) => (400, format!("invalid rate {given:?}: {e}\n")),
            }
        }
        _ => (405, "use GET or POST /rate\n".into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, path: &str, query: &str, body: &str) -> telemetry::http::Request {
        telemetry::http::Request {
            method: method.into(),
            path: path.into(),
            query: query.into(),
            body: body.as_bytes().to_vec(),
        }
    }

    #[test]
    fn the_rate_route_reads_and_changes_a_fixed_rate_only() {
        let gauge = prometheus::Gauge::new("rate", "rate").unwrap();
        let control = RateControl::new(100.0);
        let route = |r: &telemetry::http::Request, c| rate_route(r, c, &gauge);
        assert_eq!(route(&request("GET", "/metrics", "", ""), Some(&control)), None);
        assert_eq!(
            route(&request("GET", "/rate", "", ""), None),
            Some((200, "unpaced\n".into()))
        );
        assert_eq!(
            route(&request("POST", "/rate", "", "5"), None).map(|a| a.0),
            Some(409)
        );
        assert_eq!(
            route(&request("POST", "/rate", "", " 250 "), Some(&control)),
            Some((200, "250\n".into()))
        );
        assert_eq!(gauge.get(), 250.0);
        assert_eq!(
            route(&request("POST", "/rate", "tps=300", ""), Some(&control)).map(|a| a.0),
            Some(200)
        );
        assert_eq!(control.get(), 300.0);
        assert_eq!(
            route(&request("POST", "/rate", "", "-1"), Some(&control)).map(|a| a.0),
            Some(400)
        );
        assert_eq!(
            route(&request("DELETE", "/rate", "", ""), Some(&control)).map(|a| a.0),
            Some(405)
        );
        assert_eq!(
            route(&request("GET", "/rate", "", ""), Some(&control)),
            Some((200, "300\n".into()))
        );
    }
}
