//! The progress line that long runs draw on stderr, shared by `fulcrum sim`,
//! `fulcrum load` and later drivers.
//!
//! [`while_running`] runs the work on the calling thread and, beside it, a
//! thread that waits a second (short runs print nothing), then redraws a
//! status line every 100 ms with a carriage return, and erases it when the
//! work ends, so the report that follows starts on a clean line. The status
//! comes from a closure, typically [`bar`] over an atomic counter and an
//! expected total. Drivers show it only when stderr is a terminal, or when
//! forced ([`wanted`]); redirected output never gets control characters.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long a run goes before its progress shows.
pub const DELAY: Duration = Duration::from_secs(1);

/// Time between redraws.
pub const TICK: Duration = Duration::from_millis(100);

/// Cells of the bar drawn by [`bar`].
const BAR_CELLS: usize = 30;

/// Whether to draw progress: when stderr is a terminal, or `forced`.
pub fn wanted(forced: bool) -> bool {
    forced || std::io::stderr().is_terminal()
}

/// A status line for `done` items of `expected`, `elapsed` into the run:
/// a bar with the percentage when the total is known, else the count.
pub fn bar(done: u64, expected: Option<u64>, what: &str, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64();
    match expected {
        Some(total) if total > 0 => {
            let frac = (done as f64 / total as f64).min(1.0);
            let filled = (frac * BAR_CELLS as f64) as usize;
            format!(
                "[{}{}] {:>3.0}% {done}/{total} {what}, {secs:.1} s",
                "#".repeat(filled),
                ".".repeat(BAR_CELLS - filled),
                frac * 100.0
            )
        }
        _ => format!("{done} {what}, {secs:.1} s"),
    }
}

/// Run `work`; if `show`, draw `status(elapsed)` on stderr meanwhile (from
/// one second in, every 100 ms) and erase it when `work` returns.
pub fn while_running<R>(show: bool, status: impl FnMut(Duration) -> String + Send, work: impl FnOnce() -> R) -> R {
    if !show {
        return work();
    }
    let finished = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| draw_until(&mut std::io::stderr(), &finished, DELAY, TICK, status));
        let result = work();
        finished.store(true, Ordering::Relaxed);
        result
    })
}

/// Redraw `status` into `out` every `tick` from `delay` on, until
/// `finished`; then blank what was drawn.
fn draw_until(
    out: &mut impl Write,
    finished: &AtomicBool,
    delay: Duration,
    tick: Duration,
    mut status: impl FnMut(Duration) -> String,
) {
    let started = Instant::now();
    let mut widest = 0usize;
    while !finished.load(Ordering::Relaxed) {
        std::thread::sleep(tick);
        let elapsed = started.elapsed();
        if elapsed < delay || finished.load(Ordering::Relaxed) {
            continue;
        }
        let line = status(elapsed);
        let width = line.chars().count();
        // Pad over the rest of a longer previous line.
        let _ = write!(out, "\r{line}{}", " ".repeat(widest.saturating_sub(width)));
        let _ = out.flush();
        widest = widest.max(width);
    }
    if widest > 0 {
        let _ = write!(out, "\r{}\r", " ".repeat(widest));
        let _ = out.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn bar_shows_the_share_done_or_the_count() {
        let line = bar(50, Some(200), "requests", Duration::from_millis(1500));
        assert_eq!(line, format!("[{}{}]  25% 50/200 requests, 1.5 s", "#".repeat(7), ".".repeat(23)));
        assert!(bar(500, Some(200), "requests", Duration::ZERO).starts_with(&format!("[{}] 100%", "#".repeat(30))));
        assert_eq!(bar(7, None, "runs", Duration::from_secs(2)), "7 runs, 2.0 s");
        assert_eq!(bar(7, Some(0), "runs", Duration::from_secs(2)), "7 runs, 2.0 s");
    }

    #[test]
    fn the_line_is_redrawn_then_erased() {
        let finished = AtomicBool::new(false);
        let calls = AtomicU64::new(0);
        let mut out = Vec::new();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let status = |_| {
                    let n = calls.fetch_add(1, Ordering::SeqCst);
                    if n == 0 {
                        "a longer first line".to_string()
                    } else {
                        "short".to_string()
                    }
                };
                draw_until(&mut out, &finished, Duration::ZERO, Duration::from_millis(1), status);
            });
            while calls.load(Ordering::SeqCst) < 3 {
                std::thread::sleep(Duration::from_millis(1));
            }
            finished.store(true, Ordering::SeqCst);
        });
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("\ra longer first line\rshort              \r"), "{text:?}");
        assert!(text.ends_with(&format!("\r{}\r", " ".repeat(19))), "{text:?}");
    }

    #[test]
    fn nothing_is_drawn_before_the_delay_or_when_not_shown() {
        let finished = AtomicBool::new(true);
        let mut out = Vec::new();
        draw_until(&mut out, &finished, Duration::ZERO, Duration::from_millis(1), |_| "x".into());
        assert!(out.is_empty());
        let mut called = false;
        assert_eq!(while_running(false, |_| String::new(), || 42), 42);
        let value = while_running(
            false,
            |_| {
                called = true;
                String::new()
            },
            || 7,
        );
        assert_eq!((value, called), (7, false));
    }
}
