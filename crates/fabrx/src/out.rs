//! Lines on stdout that end quietly when the reader has gone away (`fabrx blocks … |
//! head`): `println!` would panic on the closed pipe.

use std::io::Write;

/// Writes `text` and a newline to stdout; `false` when it cannot (the reader closed the
/// pipe — then the command should stop — or another write error, reported on stderr).
pub fn line(text: &str) -> bool {
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => false,
        Err(e) => {
            eprintln!("writing to stdout: {e}");
            false
        }
    }
}
