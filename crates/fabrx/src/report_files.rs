//! The report directory of a load run (`--report DIR`): its per-second CSV, its summary
//! and its plot.

use anyhow::Context;
use loadgen::series::Series;
use std::path::Path;

/// Writes `per_second.csv`, `summary.json` (the summary line) and `report.svg` into `dir`.
pub fn write_report(dir: &Path, series: &Series, summary_line: &str, title: &str) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating the report directory {}", dir.display()))?;
    let files = [
        ("per_second.csv", loadgen::report::csv(series)),
        ("summary.json", format!("{summary_line}\n")),
        ("report.svg", loadgen::report::svg(series, title)),
    ];
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    eprintln!("report written to {}", dir.display());
    Ok(())
}
