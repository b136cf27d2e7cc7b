//! What a backup or restore prints while it runs. A run takes minutes to
//! hours, so an operator watching it wants the rate and the time left, not
//! only one line per shard; kept apart from the runs so that the line's
//! wording can be tested without a cluster.

use std::io::Write;
use std::time::Instant;

/// `bytes` as MB with one decimal.
pub(super) fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

/// Seconds as `42 s` or `3 min 04 s`.
fn duration_text(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    if s < 60 {
        format!("{s} s")
    } else if s < 3600 {
        format!("{} min {:02} s", s / 60, s % 60)
    } else {
        format!("{} h {:02} min", s / 3600, s % 3600 / 60)
    }
}

/// Progress of a backup or restore: shards, parts and bytes done, the
/// rate and the time left. A node answers once per shard, so the counts
/// move when a shard is done; on a terminal the line is redrawn in place
/// every second (the rate and the time left move with the clock), else
/// one plain `progress` line follows each shard's line.
pub(super) struct Progress {
    pub(super) live: bool,
    t0: Instant,
    shards_total: u64,
    shards: u64,
    parts: u64,
    bytes: u64,
    /// Bytes of the whole job when known (a restore), else the time left
    /// comes from the shards done.
    bytes_total: Option<u64>,
    /// A live line is on the screen (no newline after it yet).
    drawn: bool,
}

impl Progress {
    pub(super) fn new(live: bool, shards_total: u64, bytes_total: Option<u64>) -> Progress {
        Progress {
            live,
            t0: Instant::now(),
            shards_total,
            shards: 0,
            parts: 0,
            bytes: 0,
            bytes_total,
            drawn: false,
        }
    }

    /// The line after `secs` seconds.
    fn text(&self, secs: f64) -> String {
        let rate = mb(self.bytes) / secs.max(1e-3);
        let of = self
            .bytes_total
            .map(|t| format!(" of {:.1}", mb(t)))
            .unwrap_or_default();
        let done = match self.bytes_total {
            Some(t) if t > 0 => self.bytes as f64 / t as f64,
            _ => self.shards as f64 / self.shards_total.max(1) as f64,
        };
        let left = if self.shards >= self.shards_total {
            "0 s".to_string()
        } else if done > 0.0 {
            duration_text(secs * (1.0 - done) / done)
        } else {
            "?".to_string()
        };
        format!(
            "progress {}/{} shards, {} parts, {:.1}{of} MB, {rate:.1} MB/s, {} elapsed, {left} left",
            self.shards,
            self.shards_total,
            self.parts,
            mb(self.bytes),
            duration_text(secs)
        )
    }

    /// Erases the live line, if drawn.
    fn clear(&mut self, out: &mut dyn Write) -> std::io::Result<()> {
        if self.drawn {
            write!(out, "\r\x1b[2K")?;
            self.drawn = false;
        }
        Ok(())
    }

    /// Redraws the live line (nothing when not live).
    pub(super) fn draw(&mut self, out: &mut dyn Write) -> std::io::Result<()> {
        if self.live {
            write!(
                out,
                "\r\x1b[2K{}",
                self.text(self.t0.elapsed().as_secs_f64())
            )?;
            self.drawn = true;
            out.flush()?;
        }
        Ok(())
    }

    /// A shard is done: its line, then the progress.
    pub(super) fn shard_done(
        &mut self,
        line: &str,
        parts: u64,
        bytes: u64,
        out: &mut dyn Write,
    ) -> std::io::Result<()> {
        self.shards += 1;
        self.parts += parts;
        self.bytes += bytes;
        self.clear(out)?;
        writeln!(out, "{line}")?;
        if self.live {
            self.draw(out)
        } else {
            writeln!(out, "{}", self.text(self.t0.elapsed().as_secs_f64()))
        }
    }

    /// Ends the live line before other output.
    pub(super) fn finish(&mut self, out: &mut dyn Write) -> std::io::Result<()> {
        if self.drawn {
            writeln!(out)?;
            self.drawn = false;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_says_what_is_done_the_rate_and_the_time_left() {
        let mut p = Progress::new(false, 4, Some(40_000_000));
        assert_eq!(
            p.text(2.0),
            "progress 0/4 shards, 0 parts, 0.0 of 40.0 MB, 0.0 MB/s, 2 s elapsed, ? left"
        );
        let mut out = Vec::new();
        p.shard_done("shard 0: ...", 7, 10_000_000, &mut out)
            .unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("shard 0: ...\nprogress 1/4 shards, 7 parts, 10.0 of 40.0 MB"));
        // A quarter in 10 s: 30 s left.
        assert_eq!(
            p.text(10.0),
            "progress 1/4 shards, 7 parts, 10.0 of 40.0 MB, 1.0 MB/s, 10 s elapsed, 30 s left"
        );
        // Without a byte total (a backup), the shards done say it.
        let mut b = Progress::new(false, 2, None);
        b.shards = 1;
        b.bytes = 1_000_000;
        assert!(b
            .text(90.0)
            .ends_with("1 min 30 s elapsed, 1 min 30 s left"));
        // A terminal: the line is redrawn in place, ended before others.
        let mut live = Progress::new(true, 1, None);
        let mut out = Vec::new();
        live.draw(&mut out).unwrap();
        live.shard_done("shard 0: x", 1, 5, &mut out).unwrap();
        live.finish(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("\r\x1b[2Kprogress 0/1"), "{text:?}");
        assert!(
            text.contains("\r\x1b[2Kshard 0: x\n\r\x1b[2Kprogress 1/1"),
            "{text:?}"
        );
        assert!(text.ends_with(" 0 s left\n"), "{text:?}");
    }
}
