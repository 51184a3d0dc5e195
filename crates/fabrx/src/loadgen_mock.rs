//! `fabrx loadgen --target mock-orderer` (docs/loadgen.md "A mock orderer"): the shell
//! around `devnet::load::mock`. It prints the line the run gives when it starts serving,
//! then the report files and the summary line.

use devnet::load::mock::{self, Event, Options};
use loadgen::WorkloadSpec;
use std::path::Path;

/// Runs the mock orderer and prints the summary; `report`: `--report DIR`.
pub async fn run(spec: WorkloadSpec, options: &Options, report: Option<&Path>) -> anyhow::Result<()> {
    let outcome = mock::run(spec, options, |event| match event {
        Event::Serving {
            blocks,
            load_txs,
            signing_seconds,
            listen,
            sidecar,
        } => eprintln!(
            "mock orderer: {blocks} blocks ({load_txs} load txs) signed in {signing_seconds:.1} s; serving on {listen} to the sidecar at {sidecar}"
        ),
    })
    .await?;
    let summary = &outcome.summary;
    let line = summary.line()?;
    if let Some(dir) = report {
        let title = format!(
            "fabrx loadgen --target mock-orderer · {} txs · run {}",
            summary.txs, summary.tag
        );
        crate::report_files::write_report(dir, &outcome.series, &line, &title)?;
    }
    println!("{line}");
    Ok(())
}
