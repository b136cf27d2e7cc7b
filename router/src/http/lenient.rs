//! Request targets as InfluxDB's HTTP server takes them.
//!
//! Go's `net/http` accepts a request line like
//! `POST /query?q=CREATE+DATABASE+"db0" HTTP/1.1` (InfluxDB's own test
//! client and scripts send `"` unescaped); the `http` crate hyper builds
//! URIs with refuses `"`, `#`, `<`, `>` and `` ` `` there, so hyper answers
//! an empty 400 before any handler runs. [`LenientTargets`] sits between
//! the socket and hyper and percent-encodes those bytes in each request
//! line's target (`%22`...), which every decoder reads back as the same
//! characters. Nothing else changes: headers pass as they are, bodies are
//! read straight into hyper's buffer (no copy), and anything this reader
//! does not follow (HTTP/2, an upgrade, a malformed head) passes through
//! untouched from there on, for hyper to judge.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Longest request or header line followed; a longer one switches to
/// passing bytes through (hyper refuses such heads anyway).
const MAX_LINE: usize = 64 * 1024;

/// Where the reader is in the connection's stream of requests.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// The request line; `spaces` seen so far (the target is after the
    /// first, before the second).
    RequestLine { spaces: u8, len: usize },
    /// Header lines until the empty one.
    Headers,
    /// `n` more body bytes (`Content-Length`, or a chunk's data).
    Body { n: u64, chunk: bool },
    /// The CRLF after a chunk's data.
    ChunkEnd,
    /// A chunk-size line.
    ChunkSize,
    /// Trailer lines after the last chunk, until the empty one.
    Trailers,
    /// Bytes pass unchanged from here on.
    Through,
}

/// The per-connection state machine, over plain bytes (no I/O).
#[derive(Debug)]
pub struct Framer {
    state: State,
    /// The header, chunk-size or trailer line being read.
    line: Vec<u8>,
    content_length: u64,
    chunked: bool,
}

impl Default for Framer {
    fn default() -> Self {
        Framer {
            state: State::RequestLine { spaces: 0, len: 0 },
            line: Vec::new(),
            content_length: 0,
            chunked: false,
        }
    }
}

fn needs_escape(b: u8) -> bool {
    matches!(b, b'"' | b'#' | b'<' | b'>' | b'`')
}

fn hex(n: u8) -> u8 {
    b"0123456789ABCDEF"[usize::from(n & 15)]
}

impl Framer {
    /// Body bytes that may be read straight into the caller's buffer.
    pub fn body_remaining(&self) -> Option<u64> {
        match self.state {
            State::Body { n, .. } => Some(n),
            State::Through => Some(u64::MAX),
            _ => None,
        }
    }

    /// `k` body bytes were passed through.
    pub fn consumed_body(&mut self, k: usize) {
        if let State::Body { n, chunk } = self.state {
            let left = n - k as u64;
            self.state = match (left, chunk) {
                (0, true) => State::ChunkEnd,
                (0, false) => self.next_request(),
                (n, chunk) => State::Body { n, chunk },
            };
        }
    }

    fn next_request(&mut self) -> State {
        self.content_length = 0;
        self.chunked = false;
        State::RequestLine { spaces: 0, len: 0 }
    }

    /// Feeds `input`, appending what hyper should see to `out`.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) {
        let mut i = 0;
        while i < input.len() {
            if let Some(n) = self.body_remaining() {
                let k = (input.len() - i).min(usize::try_from(n).unwrap_or(usize::MAX));
                out.extend_from_slice(&input[i..i + k]);
                self.consumed_body(k);
                i += k;
                continue;
            }
            let b = input[i];
            i += 1;
            self.byte(b, out);
        }
    }

    fn byte(&mut self, b: u8, out: &mut Vec<u8>) {
        match &mut self.state {
            State::RequestLine { spaces, len } => {
                *len += 1;
                if *len > MAX_LINE {
                    self.state = State::Through;
                } else if b == b'\n' {
                    // A bare CRLF before a request line is allowed.
                    self.state = if *len <= 2 && *spaces == 0 {
                        State::RequestLine { spaces: 0, len: 0 }
                    } else {
                        State::Headers
                    };
                } else if b == b' ' {
                    *spaces += 1;
                } else if *spaces == 1 && needs_escape(b) {
                    out.extend_from_slice(&[b'%', hex(b >> 4), hex(b)]);
                    return;
                } else if *spaces == 0 && *len == 3 && b == b'I' {
                    // "PRI * HTTP/2.0": an HTTP/2 preface, not ours to read.
                    self.state = State::Through;
                }
                out.push(b);
            }
            State::Headers | State::ChunkSize | State::Trailers => {
                out.push(b);
                if b != b'\n' {
                    self.line.push(b);
                    if self.line.len() > MAX_LINE {
                        self.state = State::Through;
                    }
                    return;
                }
                let line = std::mem::take(&mut self.line);
                self.line_done(trim(&line));
            }
            State::ChunkEnd => {
                out.push(b);
                if b == b'\n' {
                    self.state = State::ChunkSize;
                }
            }
            State::Body { .. } | State::Through => out.push(b),
        }
    }

    fn line_done(&mut self, line: &[u8]) {
        self.state = match self.state {
            State::Headers if line.is_empty() => {
                if self.chunked {
                    State::ChunkSize
                } else if self.content_length > 0 {
                    State::Body {
                        n: self.content_length,
                        chunk: false,
                    }
                } else {
                    self.next_request()
                }
            }
            State::Headers => self.header(line),
            State::ChunkSize => {
                let size = line.split(|&c| c == b';').next().unwrap_or(b"");
                match std::str::from_utf8(trim(size))
                    .ok()
                    .and_then(|s| u64::from_str_radix(s, 16).ok())
                {
                    Some(0) => State::Trailers,
                    Some(n) => State::Body { n, chunk: true },
                    None => State::Through,
                }
            }
            State::Trailers if line.is_empty() => self.next_request(),
            ref other => other.clone(),
        };
    }

    /// Reads the framing headers; anything that changes the protocol on
    /// the connection (an upgrade) hands it over to hyper untouched.
    fn header(&mut self, line: &[u8]) -> State {
        let Some(colon) = line.iter().position(|&c| c == b':') else {
            return State::Through;
        };
        let name = trim(&line[..colon]).to_ascii_lowercase();
        let value = trim(&line[colon + 1..]).to_ascii_lowercase();
        match name.as_slice() {
            b"content-length" => {
                match std::str::from_utf8(&value)
                    .ok()
                    .and_then(|v| v.parse().ok())
                {
                    Some(n) => self.content_length = n,
                    None => return State::Through,
                }
            }
            b"transfer-encoding" => {
                if value.ends_with(b"chunked") {
                    self.chunked = true;
                } else {
                    return State::Through;
                }
            }
            b"upgrade" => return State::Through,
            _ => {}
        }
        State::Headers
    }
}

fn trim(b: &[u8]) -> &[u8] {
    let start = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    let end = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &b[start..end]
}

/// A listener whose connections are [`LenientTargets`].
pub struct LenientListener<L>(pub L);

impl<L: axum::serve::Listener> axum::serve::Listener for LenientListener<L> {
    type Io = LenientTargets<L::Io>;
    type Addr = L::Addr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (io, addr) = self.0.accept().await;
        (LenientTargets::new(io), addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

/// A connection whose request targets are made acceptable to hyper (see
/// the module documentation). Writes pass through.
pub struct LenientTargets<S> {
    inner: S,
    framer: Framer,
    /// Rewritten bytes not yet handed to the reader.
    pending: Vec<u8>,
    at: usize,
}

impl<S> LenientTargets<S> {
    pub fn new(inner: S) -> Self {
        LenientTargets {
            inner,
            framer: Framer::default(),
            pending: Vec::new(),
            at: 0,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for LenientTargets<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.at < this.pending.len() {
                let k = (this.pending.len() - this.at).min(buf.remaining());
                buf.put_slice(&this.pending[this.at..this.at + k]);
                this.at += k;
                return Poll::Ready(Ok(()));
            }
            this.pending.clear();
            this.at = 0;
            if let Some(n) = this.framer.body_remaining() {
                // Body bytes: straight into the caller's buffer.
                let limit = buf
                    .remaining()
                    .min(usize::try_from(n).unwrap_or(usize::MAX));
                let mut direct = ReadBuf::new(buf.initialize_unfilled_to(limit));
                ready!(Pin::new(&mut this.inner).poll_read(cx, &mut direct))?;
                let k = direct.filled().len();
                buf.advance(k);
                this.framer.consumed_body(k);
                return Poll::Ready(Ok(()));
            }
            let mut scratch = [0u8; 8192];
            let mut head = ReadBuf::new(&mut scratch);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut head))?;
            if head.filled().is_empty() {
                return Poll::Ready(Ok(())); // end of stream
            }
            this.framer.feed(head.filled(), &mut this.pending);
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for LenientTargets<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn through(chunks: &[&[u8]]) -> Vec<u8> {
        let mut f = Framer::default();
        let mut out = Vec::new();
        for c in chunks {
            f.feed(c, &mut out);
        }
        out
    }

    #[test]
    fn quotes_in_targets_are_escaped() {
        let req = b"POST /query?q=CREATE+DATABASE+\"db0\" HTTP/1.1\r\nHost: x\r\n\r\n";
        assert_eq!(
            through(&[req]),
            b"POST /query?q=CREATE+DATABASE+%22db0%22 HTTP/1.1\r\nHost: x\r\n\r\n"
        );
        // '#', '<', '>' and '`' too; headers keep theirs.
        let req = b"GET /q?a=<#>` HTTP/1.1\r\nX: \"<#>\"\r\n\r\n";
        assert_eq!(
            through(&[req]),
            b"GET /q?a=%3C%23%3E%60 HTTP/1.1\r\nX: \"<#>\"\r\n\r\n"
        );
    }

    #[test]
    fn bodies_pass_untouched_and_the_next_request_is_fixed_too() {
        let stream: &[u8] = b"POST /write?db=\"a\" HTTP/1.1\r\nContent-Length: 7\r\n\r\nm \"x\"=1GET /q?\" HTTP/1.1\r\n\r\n";
        let want: &[u8] = b"POST /write?db=%22a%22 HTTP/1.1\r\nContent-Length: 7\r\n\r\nm \"x\"=1GET /q?%22 HTTP/1.1\r\n\r\n";
        assert_eq!(through(&[stream]), want);
        // The same, one byte at a time.
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(through(&bytes), want);
    }

    #[test]
    fn chunked_bodies_are_followed() {
        let stream: &[u8] = b"POST /w HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;x=1\r\n\"\"\"\r\n0\r\nT: 1\r\n\r\nGET /q?\" HTTP/1.1\r\n\r\n";
        let want: &[u8] = b"POST /w HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;x=1\r\n\"\"\"\r\n0\r\nT: 1\r\n\r\nGET /q?%22 HTTP/1.1\r\n\r\n";
        assert_eq!(through(&[stream]), want);
        let bytes: Vec<&[u8]> = stream.chunks(3).collect();
        assert_eq!(through(&bytes), want);
    }

    #[test]
    fn what_it_does_not_follow_passes_through() {
        let h2 = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\"\"";
        assert_eq!(through(&[h2]), h2);
        let bad = b"POST /a HTTP/1.1\r\nContent-Length: x\r\n\r\nGET /\" HTTP/1.1\r\n";
        assert_eq!(through(&[bad]), bad);
        let upgrade = b"GET /a HTTP/1.1\r\nUpgrade: websocket\r\n\r\n\"";
        assert_eq!(through(&[upgrade]), upgrade);
    }

    #[tokio::test]
    async fn a_connection_reads_the_rewritten_stream() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut client, server) = tokio::io::duplex(64);
        let body = vec![b'"'; 10_000];
        let mut req = format!(
            "POST /x?q=\"a\" HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        req.extend_from_slice(&body);
        let writer = tokio::spawn(async move {
            client.write_all(&req).await.unwrap();
            client.shutdown().await.unwrap();
        });
        let mut got = Vec::new();
        LenientTargets::new(server)
            .read_to_end(&mut got)
            .await
            .unwrap();
        writer.await.unwrap();
        let mut want = b"POST /x?q=%22a%22 HTTP/1.1\r\nContent-Length: 10000\r\n\r\n".to_vec();
        want.extend_from_slice(&body);
        assert_eq!(got, want);
    }
}
