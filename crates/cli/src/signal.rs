//! SIGINT and SIGTERM for commands that run until told to stop.
//!
//! [`on_signals`] runs a callback on a thread of its own for each signal, so
//! that blocking code (a load run, a set of backends) goes on undisturbed
//! and decides itself what a first and a second signal mean.

use std::io;

/// Call `f(n)` on the `n`-th SIGINT or SIGTERM (from 1), forever; returns
/// once the handlers are installed.
pub fn on_signals(mut f: impl FnMut(u32) + Send + 'static) -> io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    // Installed here rather than on the thread, so an error is returned.
    let (mut term, mut int) = runtime.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        Ok::<_, io::Error>((signal(SignalKind::terminate())?, signal(SignalKind::interrupt())?))
    })?;
    std::thread::Builder::new().name("fulcrum-signals".into()).spawn(move || {
        runtime.block_on(async {
            for n in 1.. {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
                f(n);
            }
        })
    })?;
    Ok(())
}
